package record

import (
	"errors"
	"fmt"
	"time"
)

// Anchor is the operator's signed statement of a record's length and head: the record of Claim
// has Count entries and the last one's hash is Head. Sealed says the claim ended: the record is
// complete.
type Anchor struct {
	V      int    `json:"v"`
	Claim  string `json:"claim"`
	Count  uint64 `json:"count"`
	Head   string `json:"head"`
	Sealed bool   `json:"sealed,omitempty"`
	Time   string `json:"time"`
	Key    string `json:"key"`
	Sig    string `json:"sig,omitempty"`
}

func (a Anchor) message() ([]byte, error) {
	a.Sig = ""
	return marshal(a)
}

// Chain appends entries to one claim's record, chaining and signing each: the leader's.
type Chain struct {
	claim  string
	signer *Signer
	count  uint64
	head   string
	sealed bool
}

// NewChain starts the empty record of the claim with UID claimUID.
func NewChain(claimUID string, signer *Signer) (*Chain, error) {
	return Resume(claimUID, signer, 0, "")
}

// Resume continues a record of count entries whose last hash is head (as its stored anchor
// says: a new leader resumes there).
func Resume(claimUID string, signer *Signer, count uint64, head string) (*Chain, error) {
	if claimUID == "" {
		return nil, errors.New("a record needs its claim's UID")
	}
	if signer == nil {
		return nil, errors.New("a record needs a signer")
	}
	if count == 0 {
		head = Genesis(claimUID)
	} else if len(head) != 64 {
		return nil, fmt.Errorf("resuming after %d entries needs the head's hash, got %q", count, head)
	}
	return &Chain{claim: claimUID, signer: signer, count: count, head: head}, nil
}

// ErrSealed refuses an append to a sealed record.
var ErrSealed = errors.New("the record is sealed")

// Append fills e's version, claim, seq, prev, key, hash and signature, and returns it. The
// caller fills the rest; an entry without a time, source or kind is refused.
func (c *Chain) Append(e Entry) (Entry, error) {
	if c.sealed {
		return Entry{}, ErrSealed
	}
	if e.Time == "" || e.Source == "" || e.Kind == "" {
		return Entry{}, fmt.Errorf("an entry needs a time, a source and a kind (got %q, %q, %q)", e.Time, e.Source, e.Kind)
	}
	e.V, e.Claim, e.Seq, e.Prev, e.Key = Version, c.claim, c.count+1, c.head, c.signer.id
	h, err := e.ComputeHash()
	if err != nil {
		return Entry{}, err
	}
	e.Hash = h
	e.Sig = c.signer.sign(entryMessage, []byte(h))
	c.count, c.head = e.Seq, h
	if e.Kind == KindRecordSealed {
		c.sealed = true
	}
	return e, nil
}

// Count is the number of entries appended.
func (c *Chain) Count() uint64 { return c.count }

// Head is the last entry's hash (the genesis of an empty record).
func (c *Chain) Head() string { return c.head }

// Anchor signs the record's length and head as of now.
func (c *Chain) Anchor(now time.Time) (Anchor, error) {
	a := Anchor{V: Version, Claim: c.claim, Count: c.count, Head: c.head, Sealed: c.sealed, Time: FormatTime(now), Key: c.signer.id}
	msg, err := a.message()
	if err != nil {
		return Anchor{}, err
	}
	a.Sig = c.signer.sign(anchorMessage, msg)
	return a, nil
}

// Seal appends the record.sealed entry (with the usage, when known) and returns it and the
// sealed anchor. Nothing can be appended after.
func (c *Chain) Seal(now time.Time, usage *Usage) (Entry, Anchor, error) {
	e, err := c.Append(Entry{Time: FormatTime(now), Source: SourceOperator, Kind: KindRecordSealed, Count: c.count + 1, Usage: usage})
	if err != nil {
		return Entry{}, Anchor{}, err
	}
	a, err := c.Anchor(now)
	return e, a, err
}
