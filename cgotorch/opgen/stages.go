package main

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"
)

// A stage is an op that a chain (a Sequential of built-in layers run in one call) or a
// one-call training step runs on the previous stage's output; its row in ops.tab ends
// in "stage". A loss stage is the loss a one-call step computes from the output and
// the target; its row ends in "loss". opgen writes from the same row the op's number
// (cg_stage_op), its case in cg::chain_stage or cg::loss_stage and package torch's
// <GoName>Stage constructor, so a stage computes what the op computes, by the same
// expression.
//
// A stage's arguments travel in cg_stage's fixed arrays (cgotorch.h): tensors in
// tensors[], doubles and scalars in doubles[], and int64s, bools and int64 lists
// (length first) one after the other in ints[].
const (
	stageTensors = 6  // CG_STAGE_TENSORS
	stageDoubles = 4  // CG_STAGE_DOUBLES
	stageInts    = 16 // CG_STAGE_INTS
)

// checkStage reports why o cannot be a stage: its first parameter must be the input
// (self or a tensor), and a loss's first two the output and the target (tensors); it
// must return one tensor, and its other parameters must fit in cg_stage.
func (o op) checkStage() error {
	if o.result != "tensor" {
		return fmt.Errorf("its result is %s, not tensor", o.result)
	}
	ps := o.params
	if o.stage == "loss" && (o.self || len(ps) < 2 || ps[0].kind != "tensor" || ps[1].kind != "tensor") {
		return fmt.Errorf("its first two parameters must be tensors: the output and the target")
	}
	if o.stage == "stage" && !o.self && (len(ps) == 0 || ps[0].kind != "tensor") {
		return fmt.Errorf("its first parameter must be self or a tensor: the previous stage's output")
	}
	nt, nd, ni := 0, 0, 0
	for _, a := range o.stageArgs() {
		switch a.kind {
		case "tensor", "tensor?":
			nt = a.slot + 1
		case "double", "scalar":
			nd = a.slot + 1
		case "int64", "bool":
			ni++
		case "int64s":
			ni += 2 // a length and at least one value
		default:
			return fmt.Errorf("parameter %s is a %s, which a stage cannot hold", a.name, a.kind)
		}
	}
	if nt > stageTensors || nd > stageDoubles || ni > stageInts {
		return fmt.Errorf("it needs more than cg_stage's %d tensors, %d doubles or %d ints", stageTensors, stageDoubles, stageInts)
	}
	return nil
}

func stageOps(ops []op) []op {
	var out []op
	for _, o := range ops {
		if o.stage != "" {
			out = append(out, o)
		}
	}
	return out
}

// inputs are the names the expression gives the stage's inputs (a loss's output and
// target); args are the rest.
func (o op) inputs() ([]string, []param) {
	switch {
	case o.self:
		return []string{"self"}, o.params
	case o.stage == "loss":
		return []string{o.params[0].name, o.params[1].name}, o.params[2:]
	}
	return []string{o.params[0].name}, o.params[1:]
}

// stageArg is a stage's argument and its place in cg_stage: its index in tensors[] or
// doubles[] (ints are stored in order and have none).
type stageArg struct {
	param
	slot int
}

// stageArgs are o's arguments less its inputs, with their places in cg_stage: the one
// layout that the C++ reader (stageCase) and the Go writer (stageFunc) both follow.
func (o op) stageArgs() []stageArg {
	_, args := o.inputs()
	out := make([]stageArg, len(args))
	nt, nd := 0, 0
	for i, p := range args {
		out[i].param = p
		switch p.kind {
		case "tensor", "tensor?":
			out[i].slot, nt = nt, nt+1
		case "double", "scalar":
			out[i].slot, nd = nd, nd+1
		}
	}
	return out
}

func (o op) stageEnum() string { return "CG_STAGE_" + o.goName }

// stageConst is the op's StageOp constant in package cgotorch: StageConv2d.
func (o op) stageConst() string { return "Stage" + strings.ToUpper(o.goName[:1]) + o.goName[1:] }

func genStagesH(stages []op) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("// The ops a chain stage or a step's loss can run (cg_stage.op): ops.tab's rows marked\n// stage or loss.\n")
	b.WriteString("#ifndef GOTRAIN_CGOTORCH_STAGES_GEN_H\n#define GOTRAIN_CGOTORCH_STAGES_GEN_H\n\nenum cg_stage_op {\n")
	for i, o := range stages {
		fmt.Fprintf(&b, "  %s = %d,  // %s (ops.tab line %d)\n", o.stageEnum(), i, o.name, o.line)
	}
	fmt.Fprintf(&b, "  CG_STAGE_OPS = %d\n};\n\n#endif\n", len(stages))
	return b.Bytes()
}

// stageCase is o's case in cg::chain_stage: the arguments read from the stage, then
// the row's expression.
func (o op) stageCase() string {
	var b strings.Builder
	ins, _ := o.inputs()
	fmt.Fprintf(&b, "    case %s: {\n", o.stageEnum())
	for i, in := range ins {
		fmt.Fprintf(&b, "      const at::Tensor &%s = %s;\n", in, []string{"in", "target"}[i])
	}
	for _, a := range o.stageArgs() {
		n := a.name
		switch a.kind {
		case "tensor":
			fmt.Fprintf(&b, "      at::Tensor &%s = cg::T(s.tensors[%d]);\n", n, a.slot)
		case "tensor?":
			fmt.Fprintf(&b, "      std::optional<at::Tensor> %s = cg::opt(s.tensors[%d]);\n", n, a.slot)
		case "double":
			fmt.Fprintf(&b, "      double %s = s.doubles[%d];\n", n, a.slot)
		case "scalar":
			fmt.Fprintf(&b, "      at::Scalar %s = cg::scalar(s.doubles[%d]);\n", n, a.slot)
		case "int64":
			fmt.Fprintf(&b, "      int64_t %s = *i++;\n", n)
		case "bool":
			fmt.Fprintf(&b, "      bool %s = *i++ != 0;\n", n)
		case "int64s":
			fmt.Fprintf(&b, "      at::IntArrayRef %s(i + 1, i[0]);\n      i += 1 + i[0];\n", n)
		}
	}
	fmt.Fprintf(&b, "      return %s;\n    }\n", o.expr)
	return b.String()
}

func genStagesCC(stages []op) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("// cg::chain_stage and cg::loss_stage: a stage's op over its input (a loss's over the\n// output and the target), by the expression of the op's ops.tab row.\n")
	b.WriteString("#include <ATen/core/grad_mode.h>\n#include \"internal.h\"\n")
	for _, f := range []struct{ kind, sig string }{
		{"stage", "chain_stage(const cg_stage &s, const at::Tensor &in)"},
		{"loss", "loss_stage(const cg_stage &s, const at::Tensor &in, const at::Tensor &target)"},
	} {
		fmt.Fprintf(&b, "\nat::Tensor cg::%s {\n  const int64_t *i = s.ints;\n", f.sig)
		b.WriteString("  switch (static_cast<cg_stage_op>(s.op)) {\n")
		for _, o := range stages {
			if o.stage == f.kind {
				b.WriteString(o.stageCase())
			}
		}
		fmt.Fprintf(&b, "    default:\n      break;\n  }\n  TORCH_CHECK(false, \"stage op \", s.op, \" is not a %s\");\n}\n",
			map[string]string{"stage": "layer", "loss": "loss"}[f.kind])
	}
	return b.Bytes()
}

// genStagesGo writes package cgotorch's StageOp constants, cg_stage_op's values (both
// are numbered in ops.tab's order).
func genStagesGo(stages []op) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("\npackage cgotorch\n\n// The ops of cg_stage_op (stages_gen.h), numbered alike.\nconst (\n")
	for i, o := range stages {
		fmt.Fprintf(&b, "\t%s StageOp = %d // %s (ops.tab line %d)\n", o.stageConst(), i, o.name, o.line)
	}
	b.WriteString(")\n")
	return format.Source(b.Bytes())
}

// stageFunc is package torch's constructor of o's stage: the op's parameters less its
// input, stored in the stage.
func (o op) stageFunc() string {
	ins, _ := o.inputs()
	var params, body []string
	for _, a := range o.stageArgs() {
		n := a.name
		switch a.kind {
		case "tensor", "tensor?":
			params = append(params, n+" *Tensor")
			body = append(body, fmt.Sprintf("s.t[%d] = %s", a.slot, n))
		case "double", "scalar":
			params = append(params, n+" float64")
			body = append(body, fmt.Sprintf("s.c.Doubles[%d] = %s", a.slot, n))
		case "int64":
			params = append(params, n+" int64")
			body = append(body, fmt.Sprintf("s.putInts(%s)", n))
		case "bool":
			params = append(params, n+" bool")
			body = append(body, fmt.Sprintf("s.putBool(%s)", n))
		case "int64s":
			if a.variadic {
				params = append(params, n+" ...int64")
			} else {
				params = append(params, n+" []int64")
			}
			body = append(body, fmt.Sprintf("s.putList(%s)", n))
		}
	}
	name := o.goName + "Stage"
	typ, ctor := "Stage", "newStage"
	doc := fmt.Sprintf("%s is the chain stage of %s (ops.tab line %d), with %s the previous stage's output: %s", name, o.goName, o.line, ins[0], o.doc)
	if o.stage == "loss" {
		typ, ctor = "LossStage", "newLossStage"
		doc = fmt.Sprintf("%s is the loss stage of %s (ops.tab line %d), with %s the forward's output and %s the target: %s", name, o.goName, o.line, ins[0], ins[1], o.doc)
	}
	var set strings.Builder
	for _, l := range body {
		set.WriteString("\t" + l + "\n")
	}
	return fmt.Sprintf("%s\nfunc %s(%s) %s {\n\ts := %s(cgotorch.%s, %q)\n%s\treturn s\n}\n",
		comment(doc), name, strings.Join(params, ", "), typ, ctor, o.stageConst(), o.name, set.String())
}
