// Command apicount counts the exported API of pglease's public packages, the
// figure issue #50 tracks: exported names (top-level types, functions,
// constants and variables, and the methods of exported types) and exported
// fields (of exported struct types, embedded ones included). Test files are
// left out. It prints one line per package and a total:
//
//	go run ./scripts/apicount            # the public packages
//	go run ./scripts/apicount -v         # and every name it counts
//	go run ./scripts/apicount ./runslots # the packages given
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// public is what the module offers users: the packages counted by default.
var public = []string{"./pglease", "./runslots", "./supervisor", "./shardgroup", "./ratelimit", "./pgleaseadmin", "./pgleasemigrate"}

// count is the exported API of one package.
type count struct {
	names, fields []string
}

func main() {
	verbose := flag.Bool("v", false, "list every name and field counted")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = public
	}
	var names, fields int
	for _, dir := range dirs {
		c, err := countDir(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apicount:", err)
			os.Exit(1)
		}
		fmt.Printf("%-18s %4d names %4d fields\n", filepath.Base(dir), len(c.names), len(c.fields))
		if *verbose {
			for _, n := range c.names {
				fmt.Println("\t" + n)
			}
			for _, f := range c.fields {
				fmt.Println("\tfield " + f)
			}
		}
		names += len(c.names)
		fields += len(c.fields)
	}
	fmt.Printf("%-18s %4d names %4d fields\n", "total", names, fields)
}

// countDir parses the non-test Go files of dir and counts what go doc shows.
func countDir(dir string) (count, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return count{}, err
	}
	var files []*ast.File
	for _, e := range entries {
		if !isSource(e) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return count{}, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return count{}, fmt.Errorf("%s: no Go files", dir)
	}
	p, err := doc.NewFromFiles(fset, files, dir)
	if err != nil {
		return count{}, err
	}
	var c count
	values := func(vs []*doc.Value, kind string) {
		for _, v := range vs {
			for _, n := range v.Names {
				if token.IsExported(n) {
					c.names = append(c.names, kind+" "+n)
				}
			}
		}
	}
	funcs := func(fs []*doc.Func, prefix string) {
		for _, f := range fs {
			c.names = append(c.names, prefix+f.Name)
		}
	}
	values(p.Consts, "const")
	values(p.Vars, "var")
	funcs(p.Funcs, "func ")
	for _, t := range p.Types {
		c.names = append(c.names, "type "+t.Name)
		values(t.Consts, "const")
		values(t.Vars, "var")
		funcs(t.Funcs, "func ")
		funcs(t.Methods, "method "+t.Name+".")
		for _, spec := range t.Decl.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || ts.Name.Name != t.Name {
				continue
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, f := range st.Fields.List {
				for _, n := range fieldNames(f) {
					if token.IsExported(n) {
						c.fields = append(c.fields, t.Name+"."+n)
					}
				}
			}
		}
	}
	slices.Sort(c.names)
	slices.Sort(c.fields)
	return c, nil
}

// isSource reports whether e is a Go file of the package, not of its tests.
func isSource(e fs.DirEntry) bool {
	n := e.Name()
	return !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go")
}

// fieldNames returns a field's names; an embedded field is named by its type.
func fieldNames(f *ast.Field) []string {
	if len(f.Names) > 0 {
		var ns []string
		for _, n := range f.Names {
			ns = append(ns, n.Name)
		}
		return ns
	}
	t := f.Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch t := t.(type) {
	case *ast.Ident:
		return []string{t.Name}
	case *ast.SelectorExpr:
		return []string{t.Sel.Name}
	}
	return nil
}
