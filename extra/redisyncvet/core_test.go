package redisyncvet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The methods the analyzer knows are the core's (in a checkout of the
// repository, where the core is at ../..): each exists on its type, takes
// the context first, and an acquisition returns (context.Context, error);
// every method of those types that returns a hold's context that way is
// one of its acquisitions; and the test stub's methods (testdata) have the
// core's signatures. Outside a checkout (the module alone) it is skipped.
func TestMethodsMatchCore(t *testing.T) {
	root := filepath.Join("..", "..")
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.HasPrefix(string(b), "module "+CorePath+"\n") {
		t.Skip("the core is not at ../..")
	}
	core := declaredMethods(t, root)
	stub := declaredMethods(t, filepath.Join("testdata", "src", filepath.FromSlash(CorePath)))
	for typ, ms := range methods {
		for name, m := range ms {
			sig, ok := core[typ+"."+name]
			if !ok {
				t.Errorf("(*%s).%s is not a method of the core", typ, name)
				continue
			}
			if !strings.HasPrefix(sig, "(ctx context.Context") {
				t.Errorf("(*%s).%s%s does not take the context first", typ, name, sig)
			}
			if m.role == acquire && !strings.HasSuffix(sig, " (context.Context, error)") {
				t.Errorf("(*%s).%s%s does not return a hold's context", typ, name, sig)
			}
			if s, ok := stub[typ+"."+name]; !ok || s != sig {
				t.Errorf("the stub's (*%s).%s is %q, the core's %q", typ, name, s, sig)
			}
		}
	}
	for key, sig := range core {
		typ, name, _ := strings.Cut(key, ".")
		if _, known := methods[typ]; known && strings.HasPrefix(sig, "(ctx context.Context") &&
			strings.HasSuffix(sig, " (context.Context, error)") && methods[typ][name].role != acquire {
			t.Errorf("(*%s).%s%s returns a hold's context, and is not one of the analyzer's acquisitions", typ, name, sig)
		}
	}
}

// declaredMethods returns the signatures of the methods declared in dir's
// non-test Go files, by "Type.Method".
func declaredMethods(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 || !fd.Name.IsExported() {
				continue
			}
			star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			id, ok := star.X.(*ast.Ident)
			if !ok {
				continue
			}
			out[id.Name+"."+fd.Name.Name] = strings.TrimPrefix(types.ExprString(fd.Type), "func")
		}
	}
	return out
}
