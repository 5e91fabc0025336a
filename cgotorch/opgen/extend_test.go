package main

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExtendOp adds an op as docs/extending.md says ("An op"): one row appended to
// ops.tab. Generating from the table gives each of the four op files the new op
// — the C prototype, the C++ body inside the exception guard with its trace entry, its
// case in the replayer, the cgo wrapper and package torch's method with the row's doc
// line — and changes nothing else in them.
// (The op's numbers are then checked against PyTorch in torch/numerics_test.go; building
// libtorch's headers is too slow for a unit test.)
func TestExtendOp(t *testing.T) {
	table := opsTable(t)
	const row = "Cube | pow | self | tensor | at::pow(self, 3) | returns t**3, elementwise.\n"
	before := generateFrom(t, table)
	after := generateFrom(t, append(table, row...))

	line := strings.Count(string(table), "\n") + 1
	ops, err := parse(table, "ops.tab")
	require.NoError(t, err)
	num := strconv.Itoa(len(ops)) // its number in a trace: its row's index
	want := map[string][]string{
		"../ops_gen.h": {"void cg_op_Cube(cg_tensor self_, cg_result *ret_);"},
		"../ops_gen.cc": {
			"void cg_op_Cube(cg_tensor self_, cg_result *ret_) {\n  CG_TRY\n  at::Tensor &self = cg::A(self_);\n  *ret_ = cg::res(at::pow(self, 3));\n" +
				"  if (cg::recording()) {\n    cg::Rec rec_(" + num + ");\n    rec_.t(self_);\n    rec_.out(ret_->t);\n  }\n  CG_CATCH_INTO(res)\n}",
			"    case " + num + ": {  // Cube\n      cg_tensor self_ = rd_.t();\n      at::Tensor &self = cg::A(self_);\n      rd_.out(at::pow(self, 3));\n      return;\n    }",
			"      \"pow\",\n  };",
		},
		"../ops_gen.go":          {"#cgo noescape cg_op_Cube", "// OpCube is pow (ops.tab line " + strconv.Itoa(line) + ").", "func OpCube(self Tensor) Result {"},
		"../../torch/ops_gen.go": {"// Cube returns t**3, elementwise.\nfunc (t *Tensor) Cube() *Tensor {\n\treturn adopt(\"pow\", cgotorch.OpCube(t.handle()))\n}"},
	}
	for path, pieces := range want {
		got, ok := after[path]
		require.True(t, ok, "%s is generated", path)
		for _, p := range pieces {
			assert.Contains(t, string(got), p, path)
		}
		// Only additions: every line of the file without the row is still there, in order.
		assert.True(t, isSubsequence(lines(before[path]), lines(got)), "%s: the other ops are unchanged", path)
		if strings.HasSuffix(path, ".go") {
			_, err := parser.ParseFile(token.NewFileSet(), path, got, parser.ParseComments)
			assert.NoError(t, err, "%s parses", path)
		}
	}
}

func lines(b []byte) []string { return strings.Split(string(b), "\n") }

// isSubsequence reports whether a's lines appear in b in order.
func isSubsequence(a, b []string) bool {
	i := 0
	for _, l := range b {
		if i < len(a) && a[i] == l {
			i++
		}
	}
	return i == len(a)
}
