package torch_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/gotrain/gotrain"

// TestOnlyTorchImportsCgotorch keeps the C boundary sealed: package torch is the only
// importer of cgotorch, in every build configuration.
func TestOnlyTorchImportsCgotorch(t *testing.T) {
	for _, tags := range []string{"cpu", "", "cpu,nodist"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", module+"/...").CombinedOutput()
		require.NoError(t, err, "go list: %s", out)
		importers := 0
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, ":")
			for _, imp := range strings.Fields(imports) {
				if imp == module+"/cgotorch" {
					require.Equal(t, module+"/torch", pkg, "tags %q: %s imports cgotorch; only package torch may", tags, pkg)
					importers++
				}
			}
		}
		require.Equal(t, 1, importers, "tags %q", tags)
	}
}

// TestNoHandleInExportedAPI fails when an exported identifier outside cgotorch has a
// cgotorch or unsafe.Pointer type in its signature, fields or type.
func TestNoHandleInExportedAPI(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var bad []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "cgotorch" || n == ".venv" || n == ".cache" || n == "build" || strings.HasPrefix(n, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) && mentionsHandle(d.Type) {
					bad = append(bad, rel+": func "+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && exportedPartMentionsHandle(s.Type) {
							bad = append(bad, rel+": type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Type != nil && mentionsHandle(s.Type) {
								bad = append(bad, rel+": "+n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, bad, "exported identifiers with cgotorch or unsafe.Pointer types")
}

func exportedRecv(r *ast.FieldList) bool {
	typ := r.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}

// exportedPartMentionsHandle looks at a type's exported fields and methods only.
func exportedPartMentionsHandle(typ ast.Expr) bool {
	switch x := typ.(type) {
	case *ast.StructType:
		for _, f := range x.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() && mentionsHandle(f.Type) {
					return true
				}
			}
			if len(f.Names) == 0 && mentionsHandle(f.Type) { // embedded
				return true
			}
		}
		return false
	case *ast.InterfaceType:
		for _, m := range x.Methods.List {
			if (len(m.Names) == 0 || m.Names[0].IsExported()) && mentionsHandle(m.Type) {
				return true
			}
		}
		return false
	}
	return mentionsHandle(typ)
}

func mentionsHandle(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && (id.Name == "cgotorch" || id.Name == "unsafe" && sel.Sel.Name == "Pointer") {
				found = true
			}
		}
		return !found
	})
	return found
}
