package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
)

// snapshotDiffBytes caps the patch snapshot_diff returns.
const snapshotDiffBytes = procgroup.ForegroundOutputBytes

// SnapshotCreateInput is the input of the snapshot_create tool.
type SnapshotCreateInput struct {
	Name        string `json:"name,omitempty" jsonschema:"the snapshot's id, chosen by you, e.g. before-refactor: letters, digits, _ . and -, starting with a letter, digit or _, at most 100 bytes (s followed by digits is kept for generated ids); default a generated id s1, s2, ...; a name already taken moves the older snapshot to a generated id"`
	Description string `json:"description,omitempty" jsonschema:"a few words on what state this is, e.g. before the refactor (one line, at most 200 bytes); the same as label"`
	Label       string `json:"label,omitempty" jsonschema:"the same as description"`
}

// SnapshotCreateOutput is the structured result of the snapshot_create tool.
type SnapshotCreateOutput struct {
	snapshot.Snapshot
	Files    int    `json:"files" jsonschema:"number of files in the snapshot"`
	Replaced string `json:"replaced,omitempty" jsonschema:"when the name was taken: the generated id the older snapshot of that name now has"`
}

// SnapshotListInput is the input of the snapshot_list tool.
type SnapshotListInput struct{}

// SnapshotListOutput is the structured result of the snapshot_list tool.
type SnapshotListOutput struct {
	Snapshots []snapshot.Snapshot `json:"snapshots" jsonschema:"the snapshots, oldest first"`
}

// SnapshotRestoreInput is the input of the snapshot_restore tool.
type SnapshotRestoreInput struct {
	ID   string `json:"id,omitempty" jsonschema:"id of the snapshot to restore, e.g. s3 or the name given to snapshot_create; give id or name"`
	Name string `json:"name,omitempty" jsonschema:"the same as id"`
}

// SnapshotRestoreOutput is the structured result of the snapshot_restore tool.
type SnapshotRestoreOutput struct {
	ID      string                `json:"id" jsonschema:"the snapshot restored"`
	Backup  string                `json:"backup" jsonschema:"id of the snapshot of the workspace as it was just before the restore (restore it to undo)"`
	Changes []snapshot.FileChange `json:"changes" jsonschema:"the files the restore changed: added (they come back), modified, deleted (created after the snapshot, now removed)"`
}

// SnapshotDiffInput is the input of the snapshot_diff tool.
type SnapshotDiffInput struct {
	ID   string `json:"id,omitempty" jsonschema:"id of the snapshot to compare from, e.g. s3 or the name given to snapshot_create; give id or name"`
	Name string `json:"name,omitempty" jsonschema:"the same as id"`
	ToID string `json:"to_id,omitempty" jsonschema:"id of the snapshot to compare to; default the workspace as it is now"`
}

// SnapshotDiffOutput is the structured result of the snapshot_diff tool.
type SnapshotDiffOutput struct {
	From    string                `json:"from" jsonschema:"the snapshot compared from"`
	To      string                `json:"to" jsonschema:"the snapshot compared to, or workspace"`
	Changes []snapshot.FileChange `json:"changes" jsonschema:"the files that differ"`
	Patch   string                `json:"patch,omitempty" jsonschema:"the unified diff, capped at 100 KiB with the elision said"`
}

// errNoSnapshots is the tool error of a sandboxd without a snapshot store.
var errNoSnapshots = errors.New("snapshots are not available in this sandbox (no state directory)")

// snapshotCall runs f with the store's lock held and a bound on its time.
func (tb *Toolbox) snapshotCall(ctx context.Context, f func(context.Context, *snapshot.Store) error) error {
	if tb.snaps == nil {
		return errNoSnapshots
	}
	ctx, cancel := context.WithTimeout(ctx, snapshot.Timeout)
	defer cancel()
	release, err := tb.snaps.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("cancelled while waiting for another snapshot operation: %v", err)
	}
	defer release()
	return f(ctx, tb.snaps)
}

// snapshotCreate is the snapshot_create tool.
func (tb *Toolbox) snapshotCreate(ctx context.Context, in SnapshotCreateInput) (*mcp.CallToolResult, SnapshotCreateOutput, error) {
	label, err := oneOf("description", in.Description, "label", in.Label)
	if err != nil {
		return nil, SnapshotCreateOutput{}, err
	}
	if label, err = cleanLabel(label); err != nil {
		return nil, SnapshotCreateOutput{}, err
	}
	if in.Name != "" {
		if err := snapshot.CheckName(in.Name); err != nil {
			return nil, SnapshotCreateOutput{}, err
		}
	}
	var out SnapshotCreateOutput
	err = tb.snapshotCall(ctx, func(ctx context.Context, s *snapshot.Store) error {
		sn, files, replaced, err := s.Create(ctx, in.Name, label)
		out = SnapshotCreateOutput{Snapshot: sn, Files: files, Replaced: replaced}
		return err
	})
	if err != nil {
		return nil, SnapshotCreateOutput{}, err
	}
	moved := ""
	if out.Replaced != "" {
		moved = fmt.Sprintf(" The snapshot that had the name %s before is now %s.", out.ID, out.Replaced)
	}
	return textResult(fmt.Sprintf("Snapshot %s taken (%d files)%s.%s Restore it with snapshot_restore, compare with snapshot_diff.", out.ID, out.Files, labelSuffix(label), moved)), out, nil
}

// snapshotList is the snapshot_list tool.
func (tb *Toolbox) snapshotList(ctx context.Context, _ SnapshotListInput) (*mcp.CallToolResult, SnapshotListOutput, error) {
	out := SnapshotListOutput{Snapshots: []snapshot.Snapshot{}}
	err := tb.snapshotCall(ctx, func(ctx context.Context, s *snapshot.Store) error {
		all, err := s.List(ctx)
		out.Snapshots = append(out.Snapshots, all...)
		return err
	})
	if err != nil {
		return nil, SnapshotListOutput{}, err
	}
	if len(out.Snapshots) == 0 {
		return textResult("No snapshots yet: take one with snapshot_create."), out, nil
	}
	var b strings.Builder
	for _, sn := range out.Snapshots {
		fmt.Fprintf(&b, "%s\t%s%s\n", sn.ID, sn.Created, labelSuffix(sn.Label))
	}
	return textResult(b.String()), out, nil
}

// snapshotRestore is the snapshot_restore tool. The call gate runs it
// alone: no other tool call is in flight while it works.
func (tb *Toolbox) snapshotRestore(ctx context.Context, in SnapshotRestoreInput) (*mcp.CallToolResult, SnapshotRestoreOutput, error) {
	id, err := snapshotArg(in.ID, in.Name)
	if err != nil {
		return nil, SnapshotRestoreOutput{}, err
	}
	var out SnapshotRestoreOutput
	err = tb.snapshotCall(ctx, func(ctx context.Context, s *snapshot.Store) error {
		target, err := s.Find(ctx, id)
		if err != nil {
			return err
		}
		backup, _, _, err := s.Create(ctx, "", "before restoring "+target.ID)
		if err != nil {
			return fmt.Errorf("saving the workspace before the restore: %v; nothing was restored", err)
		}
		changes, err := s.Changes(ctx, backup.Commit(), target.Commit())
		if err != nil {
			return err
		}
		// The files the restore writes back are the call's (docs/record.md §2.3): found as a
		// process-running call's are, by their ctime after it began.
		since := wsscan.Now()
		err = s.Restore(ctx, target)
		toolcall.RecorderFrom(ctx).FilesChanged(since)
		if err != nil {
			return fmt.Errorf("%v (the workspace as it was before is snapshot %s)", err, backup.ID)
		}
		out = SnapshotRestoreOutput{ID: target.ID, Backup: backup.ID, Changes: changes}
		if out.Changes == nil {
			out.Changes = []snapshot.FileChange{}
		}
		return nil
	})
	if err != nil {
		return nil, SnapshotRestoreOutput{}, err
	}
	count := map[string]int{}
	for _, c := range out.Changes {
		count[c.Status]++
	}
	return textResult(fmt.Sprintf("Restored snapshot %s: %d file(s) brought back, %d changed back, %d created since removed. The workspace as it was before is snapshot %s. Files must be Read again before Write or Edit.",
		out.ID, count["added"], count["modified"]+count["type_changed"], count["deleted"], out.Backup)), out, nil
}

// snapshotDiff is the snapshot_diff tool.
func (tb *Toolbox) snapshotDiff(ctx context.Context, in SnapshotDiffInput) (*mcp.CallToolResult, SnapshotDiffOutput, error) {
	id, err := snapshotArg(in.ID, in.Name)
	if err != nil {
		return nil, SnapshotDiffOutput{}, err
	}
	out := SnapshotDiffOutput{From: id, To: "workspace"}
	patch := outcap.New(snapshotDiffBytes)
	err = tb.snapshotCall(ctx, func(ctx context.Context, s *snapshot.Store) error {
		from, err := s.Find(ctx, id)
		if err != nil {
			return err
		}
		to := ""
		if in.ToID != "" {
			sn, err := s.Find(ctx, in.ToID)
			if err != nil {
				return err
			}
			to, out.To = sn.Commit(), sn.ID
		} else if err := s.Stage(ctx); err != nil {
			return err
		}
		if out.Changes, err = s.Changes(ctx, from.Commit(), to); err != nil {
			return err
		}
		return s.Patch(ctx, from.Commit(), to, patch)
	})
	if err != nil {
		return nil, SnapshotDiffOutput{}, err
	}
	if out.Changes == nil {
		out.Changes = []snapshot.FileChange{}
	}
	out.Patch = patch.String()
	if len(out.Changes) == 0 {
		return textResult(fmt.Sprintf("No differences between %s and %s.", out.From, out.To)), out, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d file(s) differ from %s to %s:\n", len(out.Changes), out.From, out.To)
	for _, c := range out.Changes {
		fmt.Fprintf(&b, "  %s\t%s\n", c.Status, c.Path)
	}
	b.WriteString("\n")
	b.WriteString(out.Patch)
	return textResult(b.String()), out, nil
}

// snapshotArg returns the snapshot an input names by id or by name (the
// field CodeGen-Sandbox's agents use): one of them, or both alike.
func snapshotArg(id, name string) (string, error) {
	v, err := oneOf("id", id, "name", name)
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", errors.New("id (or name) is required: the snapshot's id as snapshot_create and snapshot_list give it")
	}
	return v, nil
}

// cleanLabel checks a snapshot label: one line of printable text.
func cleanLabel(label string) (string, error) {
	label = strings.TrimSpace(label)
	if len(label) > snapshot.LabelBytes {
		return "", fmt.Errorf("label is %d bytes, more than %d", len(label), snapshot.LabelBytes)
	}
	if strings.IndexFunc(label, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return "", errors.New("label must be one line of printable text")
	}
	return label, nil
}

func labelSuffix(label string) string {
	if label == "" {
		return ""
	}
	return fmt.Sprintf(" %q", label)
}
