package tools

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lsMaxEntries bounds the entries LS returns.
const lsMaxEntries = 1000

// LS entry types.
const (
	lsFile    = "file"
	lsDir     = "dir"
	lsSymlink = "symlink"
	lsOther   = "other"
)

// LSInput is the input of the LS tool.
type LSInput struct {
	Path   string   `json:"path,omitempty" jsonschema:"directory to list, relative to the workspace or absolute inside it; default the workspace"`
	Ignore []string `json:"ignore,omitempty" jsonschema:"glob patterns of entries to leave out (and not descend into), matched against an entry's name, or, for a pattern with a slash, its path below path; e.g. node_modules, *.log, build/**"`
}

// LSEntry is one entry LS found.
type LSEntry struct {
	Path   string `json:"path" jsonschema:"path of the entry, relative to the workspace"`
	Type   string `json:"type" jsonschema:"file, dir, symlink or other (a device, FIFO or socket)"`
	Size   int64  `json:"size,omitempty" jsonschema:"size in bytes, for a file"`
	Target string `json:"target,omitempty" jsonschema:"for a symlink, what it points to (it is not followed)"`
}

// LSOutput is the structured result of the LS tool.
type LSOutput struct {
	Path      string    `json:"path" jsonschema:"the directory listed, relative to the workspace"`
	Entries   []LSEntry `json:"entries" jsonschema:"the entries below it, in tree order; at most 1000, nearest levels first"`
	Truncated bool      `json:"truncated,omitempty" jsonschema:"true when more entries were there than were returned"`
}

// ls is the LS tool: the tree below a directory of the workspace, level by
// level (so that a cut keeps the nearest levels), at most lsMaxEntries
// entries. .git directories and symlinked directories are listed but not
// descended into; ignored entries are neither.
func (tb *Toolbox) ls(ctx context.Context, in LSInput) (*mcp.CallToolResult, LSOutput, error) {
	base, err := tb.searchBase(in.Path, true)
	if err != nil {
		return nil, LSOutput{}, err
	}
	var ignore []*globMatcher
	for _, p := range in.Ignore {
		m, err := newGlobMatcher(p)
		if err != nil {
			return nil, LSOutput{}, fmt.Errorf("ignore: %v", err)
		}
		ignore = append(ignore, m)
	}
	ignored := func(rel string) bool {
		below := rel
		if base != "." {
			below = strings.TrimPrefix(rel, base+"/")
		}
		return slices.ContainsFunc(ignore, func(m *globMatcher) bool { return m.matchFile(below) })
	}

	out := LSOutput{Path: base, Entries: []LSEntry{}}
	fsys := tb.ws.Root().FS()
	queue := []string{base}
	visited := 0
	for len(queue) > 0 && !out.Truncated {
		dir := queue[0]
		queue = queue[1:]
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			if dir == base {
				return nil, LSOutput{}, tb.ws.Explain(base, err)
			}
			continue // vanished or unreadable below base
		}
		for _, d := range entries {
			if visited++; visited%1024 == 0 && ctx.Err() != nil {
				return nil, LSOutput{}, ctx.Err()
			}
			rel := path.Join(dir, d.Name())
			if ignored(rel) {
				continue
			}
			if len(out.Entries) == lsMaxEntries {
				out.Truncated = true
				break
			}
			e := LSEntry{Path: rel, Type: lsOther}
			switch t := d.Type(); {
			case t.IsDir():
				e.Type = lsDir
				if d.Name() != ".git" {
					queue = append(queue, rel)
				}
			case t.IsRegular():
				e.Type = lsFile
				if fi, err := d.Info(); err == nil {
					e.Size = fi.Size()
				}
			case t&fs.ModeSymlink != 0:
				e.Type = lsSymlink
				e.Target, _ = tb.ws.Root().Readlink(rel)
			}
			out.Entries = append(out.Entries, e)
		}
	}
	slices.SortFunc(out.Entries, func(a, b LSEntry) int {
		return slices.Compare(strings.Split(a.Path, "/"), strings.Split(b.Path, "/"))
	})
	return textResult(lsText(out)), out, nil
}

// lsText draws the entries as an indented tree.
func lsText(out LSOutput) string {
	var b strings.Builder
	top := out.Path
	if top == "." {
		top = "(workspace)"
	}
	fmt.Fprintf(&b, "%s/\n", strings.TrimSuffix(top, "/"))
	depth0 := strings.Count(out.Path, "/")
	if out.Path != "." {
		depth0++
	}
	for _, e := range out.Entries {
		indent := strings.Repeat("  ", strings.Count(e.Path, "/")-depth0+1)
		name := path.Base(e.Path)
		switch e.Type {
		case lsDir:
			name += "/"
		case lsSymlink:
			name += " -> " + e.Target
		case lsOther:
			name += " (not a regular file)"
		}
		fmt.Fprintf(&b, "%s- %s\n", indent, name)
	}
	if len(out.Entries) == 0 {
		b.WriteString("  (empty)\n")
	}
	if out.Truncated {
		fmt.Fprintf(&b, "(listing cut at %d entries, nearest levels first: LS a subdirectory, or pass ignore patterns)\n", lsMaxEntries)
	}
	return b.String()
}
