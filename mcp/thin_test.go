package mcp_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A tool is a thin adapter (README, How it works): it decodes, resolves
// the caller's authority (c.principal, c.actor), calls one lobby or
// substrate operation and encodes. A tool whose handler calls two
// operations has steps, and maybe rules, that belong in the lobby or the
// substrate, where another surface can reach them: move them there.
func TestToolsCallOneOperation(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "typed" {
				return true
			}
			lit, ok := call.Args[len(call.Args)-1].(*ast.FuncLit)
			if !ok {
				return true
			}
			name := toolName(call.Args[0])
			found++
			var ops []string
			ast.Inspect(lit.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if op := operation(c.Fun); op != "" {
						ops = append(ops, op)
					}
				}
				return true
			})
			max := 1
			if name == "sync_help" {
				max = 2 // the system's help or the room's: one call on either path
			}
			if len(ops) > max {
				t.Errorf("%s (%s) calls %d operations %v: make them one lobby or substrate operation", name, fset.Position(call.Pos()), len(ops), ops)
			}
			return true
		})
	}
	if found < 15 {
		t.Fatalf("found %d tools: the test no longer recognises how tools are defined", found)
	}
}

// operation names a call c.opt.<Lobby|Substrate|Auth>.<Method>.
func operation(fun ast.Expr) string {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	svc, ok := sel.X.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	opt, ok := svc.X.(*ast.SelectorExpr)
	if !ok || opt.Sel.Name != "opt" {
		return ""
	}
	switch svc.Sel.Name {
	case "Lobby", "Substrate", "Auth":
		return svc.Sel.Name + "." + sel.Sel.Name
	}
	return ""
}

// toolName is the Name in typed's &sdk.Tool{…} argument, when a literal.
func toolName(e ast.Expr) string {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	if cl, ok := e.(*ast.CompositeLit); ok {
		for _, el := range cl.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
					if b, ok := kv.Value.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(b.Value)
						return s
					}
					return "sync_delete_*"
				}
			}
		}
	}
	return "?"
}
