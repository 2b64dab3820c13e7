package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// anchorLine is the last line of a JSON lines export: {"anchor": {...}}.
type anchorLine struct {
	Anchor *Anchor `json:"anchor"`
}

// WriteJSONL writes entries one a line, each exactly as it was signed, then the anchor's line
// when a is not nil: the export that Verify reads.
func WriteJSONL(w io.Writer, entries []Entry, a *Anchor) error {
	bw := bufio.NewWriter(w)
	for _, e := range entries {
		b, err := e.Line()
		if err != nil {
			return fmt.Errorf("encoding entry %d: %w", e.Seq, err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	if a != nil {
		b, err := marshal(anchorLine{Anchor: a})
		if err != nil {
			return fmt.Errorf("encoding the anchor: %w", err)
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// MaxLineBytes bounds one line of a record (an entry's argv or message are bounded well below).
const MaxLineBytes = 1 << 20

// errLineTooLong is a line over MaxLineBytes.
var errLineTooLong = fmt.Errorf("a line over %d bytes", MaxLineBytes)

// readLines calls fn with each line of r (without its newline) and its number from 1; a line
// over MaxLineBytes is given as nil with errLineTooLong and skipped.
func readLines(r io.Reader, fn func(n int, line []byte, err error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	n := 0
	for {
		n++
		var line []byte
		tooLong := false
		for {
			chunk, isPrefix, err := br.ReadLine()
			if err == io.EOF {
				if len(line) > 0 || tooLong {
					break
				}
				return nil
			}
			if err != nil {
				return err
			}
			if !tooLong {
				line = append(line, chunk...)
				if len(line) > MaxLineBytes {
					tooLong, line = true, nil
				}
			}
			if !isPrefix {
				break
			}
		}
		if tooLong {
			fn(n, nil, errLineTooLong)
			continue
		}
		fn(n, line, nil)
	}
}

// decodeStrict decodes one JSON object of line into v, refusing unknown fields and trailing data.
func decodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the object")
	}
	return nil
}

// ReadJSONL reads an export: its entries in line order and its anchor (nil if it has none). It
// checks nothing but the form of each line; Verify checks the record.
func ReadJSONL(r io.Reader) ([]Entry, *Anchor, error) {
	var entries []Entry
	var anchor *Anchor
	var errs []error
	err := readLines(r, func(n int, line []byte, lerr error) {
		if lerr != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, lerr))
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return
		}
		if isAnchorLine(line) {
			var al anchorLine
			if err := decodeStrict(line, &al); err != nil || al.Anchor == nil {
				errs = append(errs, fmt.Errorf("line %d: not an anchor: %v", n, err))
				return
			}
			anchor = al.Anchor
			return
		}
		var e Entry
		if err := decodeStrict(line, &e); err != nil {
			errs = append(errs, fmt.Errorf("line %d: not an entry: %w", n, err))
			return
		}
		entries = append(entries, e)
	})
	if err != nil {
		return nil, nil, err
	}
	return entries, anchor, errors.Join(errs...)
}

// isAnchorLine says whether a line is the anchor's: {"anchor": ...}.
func isAnchorLine(line []byte) bool {
	return bytes.HasPrefix(bytes.TrimSpace(line), []byte(`{"anchor"`))
}
