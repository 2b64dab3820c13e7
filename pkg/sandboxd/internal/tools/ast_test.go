package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

const astSource = `package shop

import "fmt"

// Cart holds items.
type Cart struct{ items []string }

// Add adds an item.
func (c *Cart) Add(item string) {
	c.items = append(c.items, item) // keep order
}

// Len counts the items.
func (c Cart) Len() int { return len(c.items) } // trailing comment

// Inventory is a second type with a method of the same name.
type Inventory struct{}

func (Inventory) Len() int { return 0 }

// Total sums prices.
//
// It ignores negative ones.
func Total(prices []int) int {
	sum := 0
	for _, p := range prices {
		if p > 0 {
			sum += p
		}
	}
	return sum
}

func describe() string { return fmt.Sprint("shop") }
`

// newASTWorkspace writes astSource as shop/shop.go and Reads it.
func newASTWorkspace(t *testing.T) (*Toolbox, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "shop", "shop.go"), astSource)
	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "shop/shop.go"}); err != nil {
		t.Fatal(err)
	}
	return tb, ws
}

func TestEditFunctionBody(t *testing.T) {
	tb, ws := newASTWorkspace(t)
	res, out, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Total",
		NewBody: "sum:=0\nfor _,p:=range prices{sum+=p}\nreturn sum"})
	if err != nil {
		t.Fatal(err)
	}
	got := readString(t, filepath.Join(ws, "shop", "shop.go"))
	want := strings.Replace(astSource, `	sum := 0
	for _, p := range prices {
		if p > 0 {
			sum += p
		}
	}
	return sum
`, `	sum := 0
	for _, p := range prices {
		sum += p
	}
	return sum
`, 1)
	if got != want {
		t.Errorf("file after edit_function_body:\n%s\nwant:\n%s", got, want)
	}
	// The doc comment is part of the declaration shown, and the lines are the file's.
	if out.Function != "Total" || out.Line != 21 || out.EndLine != 30 || out.Lint != "" {
		t.Errorf("output %+v", out)
	}
	text := resultText(t, res)
	if !strings.Contains(text, "Replaced the body of Total in shop/shop.go (lines 21-30, gofmt'ed)") || !strings.Contains(text, "    26\t\tfor _, p := range prices {") {
		t.Errorf("result text %q", text)
	}
	// The file stays read: a second edit needs no new Read.
	if _, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "(*Cart).Add", NewBody: ""}); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(ws, "shop", "shop.go")); !strings.Contains(got, "// Add adds an item.\nfunc (c *Cart) Add(item string) {\n}\n") {
		t.Errorf("emptied body: %s", got)
	}
}

func TestChangeFunctionSignature(t *testing.T) {
	tb, ws := newASTWorkspace(t)
	_, out, err := tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: "shop/shop.go", FunctionName: "Cart.Add",
		NewSignature: "func (c *Cart)   Add(items ...string) {"})
	if err != nil {
		t.Fatal(err)
	}
	got := readString(t, filepath.Join(ws, "shop", "shop.go"))
	want := strings.Replace(astSource, "func (c *Cart) Add(item string) {", "func (c *Cart) Add(items ...string) {", 1)
	if got != want {
		t.Errorf("file after change_function_signature:\n%s", got)
	}
	if out.Function != "(Cart).Add" || out.Line != 8 || out.EndLine != 11 {
		t.Errorf("output %+v", out)
	}
	// A rename of a one-line method keeps its body and trailing comment.
	if _, _, err := tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: "shop/shop.go", FunctionName: "(Cart).Len",
		NewSignature: "func (c Cart) Count() (n int)"}); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(ws, "shop", "shop.go")); !strings.Contains(got, "// Len counts the items.\nfunc (c Cart) Count() (n int) { return len(c.items) } // trailing comment\n") {
		t.Errorf("after the rename:\n%s", got)
	}
}

func TestInsertAfterMethod(t *testing.T) {
	tb, ws := newASTWorkspace(t)
	_, out, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "shop/shop.go", ReceiverType: "*Cart", MethodName: "Len",
		NewMethod: "// Empty reports whether the cart is empty.\nfunc (c Cart) Empty() bool {\nreturn len(c.items)==0\n}"})
	if err != nil {
		t.Fatal(err)
	}
	got := readString(t, filepath.Join(ws, "shop", "shop.go"))
	want := strings.Replace(astSource, "func (c Cart) Len() int { return len(c.items) } // trailing comment\n",
		"func (c Cart) Len() int { return len(c.items) } // trailing comment\n\n// Empty reports whether the cart is empty.\nfunc (c Cart) Empty() bool {\n\treturn len(c.items) == 0\n}\n", 1)
	if got != want {
		t.Errorf("file after insert_after_method:\n%s\nwant:\n%s", got, want)
	}
	if out.Function != "(Cart).Empty" || out.Line != 16 || out.EndLine != 19 {
		t.Errorf("output %+v", out)
	}
}

// TestASTEditErrors: every bad input is an error that says what is wrong,
// and leaves the file as it was.
func TestASTEditErrors(t *testing.T) {
	tests := map[string]struct {
		call    func(tb *Toolbox) error
		wantErr string
	}{
		"not a Go file": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "notes.txt", FunctionName: "Total", NewBody: "return 0"})
			return err
		}, wantErr: "notes.txt is not a Go file"},
		"symbol not found, with what there is": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Missing", NewBody: "return"})
			return err
		}, wantErr: "function Missing not found in shop/shop.go; its functions and methods: (Cart).Add, (Cart).Len, (Inventory).Len, Total, describe"},
		"method not found on its type": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "(*Inventory).Add", NewBody: "return"})
			return err
		}, wantErr: "method Add of Inventory not found in shop/shop.go; its methods of Inventory: (Inventory).Len"},
		"ambiguous: methods on two receivers": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Len", NewBody: "return 1"})
			return err
		}, wantErr: "Len is ambiguous in shop/shop.go: 2 declarations match: (Cart).Len (line 14), (Inventory).Len (line 19)"},
		"new body that does not parse": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Total", NewBody: "return sum +"})
			return err
		}, wantErr: "new_body does not parse as Go"},
		"new body that closes the function and declares another": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Total", NewBody: "return 0\n}\n\nfunc Evil() {\npanic(1)"})
			return err
		}, wantErr: "new_body closes the function"},
		"new signature that does not parse": {call: func(tb *Toolbox) error {
			_, _, err := tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: "shop/shop.go", FunctionName: "Total", NewSignature: "func Total(prices []int int"})
			return err
		}, wantErr: "new_signature does not parse as Go"},
		"new signature with a body": {call: func(tb *Toolbox) error {
			_, _, err := tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: "shop/shop.go", FunctionName: "Total", NewSignature: "func Total() int { return 1 }"})
			return err
		}, wantErr: "new_signature"},
		"new signature that makes a method of a function": {call: func(tb *Toolbox) error {
			_, _, err := tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: "shop/shop.go", FunctionName: "Total", NewSignature: "func (c Cart) Total(prices []int) int"})
			return err
		}, wantErr: "would turn function Total into a method"},
		"new signature that is not a function": {call: func(tb *Toolbox) error {
			_, _, err := tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: "shop/shop.go", FunctionName: "Total", NewSignature: "var x = 1; func y()"})
			return err
		}, wantErr: "must be one function declaration"},
		"new method of another type": {call: func(tb *Toolbox) error {
			_, _, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "shop/shop.go", ReceiverType: "Cart", MethodName: "Add", NewMethod: "func (Inventory) Empty() bool { return true }"})
			return err
		}, wantErr: "new_method is a method of Inventory, not of Cart"},
		"new method that already exists": {call: func(tb *Toolbox) error {
			_, _, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "shop/shop.go", ReceiverType: "Cart", MethodName: "Add", NewMethod: "func (c *Cart) Len() int { return 0 }"})
			return err
		}, wantErr: "Cart already has a method Len in shop/shop.go (line 14)"},
		"new method that is two": {call: func(tb *Toolbox) error {
			_, _, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "shop/shop.go", ReceiverType: "Cart", MethodName: "Add", NewMethod: "func (c *Cart) A() {}\nfunc (c *Cart) B() {}"})
			return err
		}, wantErr: "exactly one method declaration, got 2"},
		"new method that is a function": {call: func(tb *Toolbox) error {
			_, _, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "shop/shop.go", ReceiverType: "Cart", MethodName: "Add", NewMethod: "func A() {}"})
			return err
		}, wantErr: "new_method is not a method declaration"},
		"anchor that is missing": {call: func(tb *Toolbox) error {
			_, _, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "shop/shop.go", ReceiverType: "Cart", MethodName: "Nope", NewMethod: "func (c *Cart) A() {}"})
			return err
		}, wantErr: "method Nope of Cart not found"},
		"a function name that is not one": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Total; rm", NewBody: "return 0"})
			return err
		}, wantErr: "is not a Go function or method name"},
		"a file that was not Read": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/unread.go", FunctionName: "X", NewBody: "return"})
			return err
		}, wantErr: "has not been Read"},
		"a file that does not parse": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/broken.go", FunctionName: "X", NewBody: "return"})
			return err
		}, wantErr: "shop/broken.go does not parse as Go, so it cannot be edited by declaration"},
		"a file that is missing": {call: func(tb *Toolbox) error {
			_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/none.go", FunctionName: "X", NewBody: "return"})
			return err
		}, wantErr: "no such file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			tb, ws := newASTWorkspace(t)
			sandboxdtest.WriteFile(t, filepath.Join(ws, "notes.txt"), "func Total() {}\n")
			sandboxdtest.WriteFile(t, filepath.Join(ws, "shop", "unread.go"), "package shop\n\nfunc X() {}\n")
			sandboxdtest.WriteFile(t, filepath.Join(ws, "shop", "broken.go"), "package shop\n\nfunc X() {\n")
			for _, f := range []string{"notes.txt", "shop/broken.go"} {
				if _, _, err := tb.read(t.Context(), ReadInput{FilePath: f}); err != nil {
					t.Fatal(err)
				}
			}
			sandboxdtest.WantErrContaining(t, tt.call(tb), tt.wantErr)
			sandboxdtest.CheckFile(t, filepath.Join(ws, "shop", "shop.go"), astSource)
			sandboxdtest.CheckFile(t, filepath.Join(ws, "shop", "broken.go"), "package shop\n\nfunc X() {\n")
		})
	}
}

// TestASTEditNeedsACurrentRead: a file changed since it was Read is not
// edited, as with Edit.
func TestASTEditNeedsACurrentRead(t *testing.T) {
	tb, ws := newASTWorkspace(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "shop", "shop.go"), astSource+"\nfunc more() {}\n")
	_, _, err := tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: "shop/shop.go", FunctionName: "Total", NewBody: "return 0"})
	sandboxdtest.WantErrContaining(t, err, "has changed since it was last Read")
}

// TestConfinementOfASTEdits: the AST edit tools refuse every way out of the
// workspace, and a Go file linked from outside is not edited.
func TestConfinementOfASTEdits(t *testing.T) {
	f := newEscapeFixture(t)
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "evil.go"), "package evil\n\nfunc X() { /* "+secret+" */ }\n")
	sandboxdtest.MustSymlink(t, "../outside/evil.go", filepath.Join(f.ws, "linked.go"))
	paths := append(f.escapePaths(), "../outside/evil.go", filepath.Join(f.outside, "evil.go"), "linked.go", "dir-link/evil.go", "a/b/up/evil.go")
	for _, p := range paths {
		calls := map[string]func() error{
			toolnames.EditFunctionBody: func() error {
				_, _, err := f.tb.editFunctionBody(t.Context(), EditFunctionBodyInput{FilePath: p, FunctionName: "X", NewBody: "panic(1)"})
				return err
			},
			toolnames.ChangeFunctionSignature: func() error {
				_, _, err := f.tb.changeFunctionSignature(t.Context(), ChangeFunctionSignatureInput{FilePath: p, FunctionName: "X", NewSignature: "func X(a int)"})
				return err
			},
			toolnames.InsertAfterMethod: func() error {
				_, _, err := f.tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: p, ReceiverType: "T", MethodName: "X", NewMethod: "func (T) Y() {}"})
				return err
			},
		}
		for tool, call := range calls {
			err := call()
			if err == nil {
				t.Errorf("%s(%.80q) succeeded", tool, p)
			} else if strings.Contains(err.Error(), secret) {
				t.Errorf("%s(%.80q) error leaks the secret: %v", tool, p, err)
			}
		}
	}
	sandboxdtest.CheckFile(t, filepath.Join(f.outside, "evil.go"), "package evil\n\nfunc X() { /* "+secret+" */ }\n")
	f.checkOutsideUntouched2(t, "evil.go")
}

// checkOutsideUntouched2 is checkOutsideUntouched with extra files planted
// outside.
func (f *escapeFixture) checkOutsideUntouched2(t *testing.T, extra ...string) {
	t.Helper()
	entries, err := os.ReadDir(f.outside)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"secret.txt"}, extra...)
	if len(entries) != len(want) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("outside holds %v, want %v", names, want)
	}
	sandboxdtest.CheckFile(t, filepath.Join(f.outside, "secret.txt"), secret+"\n")
}

func readString(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestInsertAfterMethodOddLines: an anchor whose last line goes on with a
// comment or a declaration spanning more lines: the new method never lands
// inside them; where it cannot go cleanly, nothing is written.
func TestInsertAfterMethodOddLines(t *testing.T) {
	const src = "package p\n\ntype T struct{}\n\nfunc (T) A() {} /* a comment\nthat goes on */\n\nfunc (T) B() {}; var x = func() int {\n\treturn 1\n}()\n"
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "p.go"), src)
	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "p.go"}); err != nil {
		t.Fatal(err)
	}
	_, _, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "p.go", ReceiverType: "T", MethodName: "B", NewMethod: "func (T) C() {}"})
	sandboxdtest.WantErrContaining(t, err, "nothing was written")
	sandboxdtest.CheckFile(t, filepath.Join(ws, "p.go"), src)

	_, out, err := tb.insertAfterMethod(t.Context(), InsertAfterMethodInput{FilePath: "p.go", ReceiverType: "T", MethodName: "A", NewMethod: "func (T) C() {}"})
	if err != nil {
		t.Fatal(err)
	}
	got := readString(t, filepath.Join(ws, "p.go"))
	if !strings.Contains(got, "func (T) A() {}\n\nfunc (T) C() {}\n") || !strings.Contains(got, "/* a comment\nthat goes on */") || out.Function != "(T).C" {
		t.Errorf("after inserting C after A (%+v):\n%s", out, got)
	}
}
