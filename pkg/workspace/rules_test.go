package workspace

import (
	"strings"
	"testing"
)

const testSandboxes = "ns/sandboxes"

func TestValidatePath(t *testing.T) {
	tests := map[string]struct {
		path    string
		wantErr string
	}{
		"simple":           {path: "ns/sandboxes/claim"},
		"dotfile":          {path: "ns/.cache"},
		"dots in a name":   {path: "ns/a..b"},
		"empty":            {path: "", wantErr: "must be set"},
		"absolute":         {path: "/content/ns", wantErr: "not absolute"},
		"parent":           {path: "..", wantErr: `".." segments`},
		"parent inside":    {path: "a/../b", wantErr: `".." segments`},
		"trailing slash":   {path: "a/b/", wantErr: "clean path"},
		"dot segment":      {path: "a/./b", wantErr: "clean path"},
		"double slash":     {path: "a//b", wantErr: "clean path"},
		"the root":         {path: ".", wantErr: "not the root itself"},
		"leading dot path": {path: "./a", wantErr: "clean path"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := ValidatePath(tc.path)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("ValidatePath(%q) = %v, want nil", tc.path, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("ValidatePath(%q) = %v, want an error containing %q", tc.path, err, tc.wantErr)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"a", "a", true},
		{"a", "a/b", true},
		{"a/b", "a", true},
		{"a", "ab", false},
		{"a/b", "a/c", false},
		{"ab/c", "a", false},
	}
	for _, tc := range tests {
		if got := Overlaps(tc.a, tc.b); got != tc.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestValidateRemovable(t *testing.T) {
	for dir, ok := range map[string]bool{
		"ns/sandboxes/c1":               true,
		"ns/sandboxes/sessions/ab12":    true,
		"ns/sandboxes/agent-0123456789": true,
		"ns/sandboxes/c1-r1":            true,
		"ns/sandboxes":                  false,
		"ns/sandboxes/sessions":         false,
		"ns/sandboxes/c1/x":             false,
		"ns/sandboxes/sessions/a/b":     false,
		"ns/sandboxes/warm/tr-cg-x7k2":  true,
		"ns/sandboxes/warm":             false,
		"ns/sandboxes/warm/a/b":         false,
		"ns/sandboxes/.hidden":          false,
		"ns/sandboxes-x/c1":             false,
		"ns/projects/c1":                false,
		"other/sandboxes/c1":            false,
		"ns/sandboxes/c1/":              false,
		"ns//sandboxes/c1":              false,
		"":                              false,
	} {
		if err := ValidateRemovable(dir, testSandboxes); (err == nil) != ok {
			t.Errorf("ValidateRemovable(%q) = %v, want ok %v", dir, err, ok)
		}
	}
}
