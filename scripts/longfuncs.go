//go:build ignore

// longfuncs lists the non-test functions of the tree longer than a limit
// (80 lines by default), longest first, and their count:
//
//	go run scripts/longfuncs.go [-max 80] [-fail N]
//
// With -fail N it exits 1 when more than N functions are over the limit.
// third_party and generated folders are skipped.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	limit := flag.Int("max", 80, "longest function allowed, in lines")
	fail := flag.Int("fail", -1, "exit 1 when more than this many functions are longer (-1: never)")
	flag.Parse()
	type fn struct {
		where string
		lines int
	}
	var long []fn
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "third_party" || path == "build" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > *limit {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) > 0 {
					t := fd.Recv.List[0].Type
					if s, ok := t.(*ast.StarExpr); ok {
						t = s.X
					}
					if id, ok := t.(*ast.Ident); ok {
						name = id.Name + "." + name
					}
				}
				long = append(long, fn{fmt.Sprintf("%s %s:%d", name, path, fset.Position(fd.Pos()).Line), n})
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	sort.Slice(long, func(i, j int) bool { return long[i].lines > long[j].lines })
	for _, f := range long {
		fmt.Printf("%4d %s\n", f.lines, f.where)
	}
	fmt.Printf("%d non-test functions over %d lines\n", len(long), *limit)
	if *fail >= 0 && len(long) > *fail {
		os.Exit(1)
	}
}
