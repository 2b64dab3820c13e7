package isolationkey

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

const (
	// SecretName is the Secret, in the operator's namespace, that holds the isolation signing
	// keys. Only the operator reads it (list and watch of this name); nothing mounts it.
	SecretName = "airlock-isolation-signing-key"
	// KeysKey is the Secret's one field: the keys as JSON (document).
	KeysKey = "keys.json"

	// DefaultRotation is how long after its making a key's successor is made: the serving
	// certificate's lifetime (servingcert.DefaultServingLifetime). A key signs for about that
	// long, which bounds what its leak would let someone sign.
	DefaultRotation = 90 * 24 * time.Hour
	// DefaultPropagation is how long a new key is published before it signs, and the least a
	// retired key stays published: the serving CA's propagation (servingcert.DefaultCAPropagation).
	// The kubelet refreshes a mounted airlock-ca within a minute or two; a runtime that copies the
	// bundle somewhere has a day.
	DefaultPropagation = 24 * time.Hour
)

// Policy is when keys rotate.
type Policy struct {
	// Rotation is how long after its making a key's successor is made; the successor signs
	// Propagation later.
	Rotation time.Duration
	// Propagation is how long a new key is published before it signs, and the least a retired
	// key stays published (after that, while a claim's statement names it).
	Propagation time.Duration
}

// DefaultPolicy is DefaultRotation and DefaultPropagation.
func DefaultPolicy() Policy {
	return Policy{Rotation: DefaultRotation, Propagation: DefaultPropagation}
}

// Validate says whether keys can rotate under p.
func (p Policy) Validate() error {
	if p.Rotation <= 0 || p.Propagation <= 0 {
		return fmt.Errorf("isolation key rotation %v and propagation %v: both must be positive", p.Rotation, p.Propagation)
	}
	return nil
}

// document is what KeysKey holds. Every time is UTC and whole seconds.
type document struct {
	// Signing is the key that signs now.
	Signing privateKey `json:"signing"`
	// Next is the key that signs from Propagation after its making on: published meanwhile.
	Next *privateKey `json:"next,omitempty"`
	// Retired are the public keys of the keys that signed before, newest first: published while
	// a statement they signed may still be handed to a runtime.
	Retired []retiredKey `json:"retired,omitempty"`
}

// privateKey is an Ed25519 key: its seed (RFC 8032's private key; base64 in JSON).
type privateKey struct {
	Seed      []byte    `json:"seed"`
	CreatedAt time.Time `json:"createdAt"`
}

// retiredKey is the public key of a key that signed before. KeyID is attestation.KeyID of it,
// for a person reading the Secret (and checked).
type retiredKey struct {
	KeyID     string    `json:"keyID"`
	PublicKey []byte    `json:"publicKey"`
	RetiredAt time.Time `json:"retiredAt"`
}

// ErrUnreadable is the error of a Secret whose keys do not parse: nothing signs or rotates until
// a person repairs it, or deletes it to revoke every key (docs/isolation.md, "The signing key").
var ErrUnreadable = errors.New("the isolation signing keys do not parse")

func (k privateKey) private() ed25519.PrivateKey { return ed25519.NewKeyFromSeed(k.Seed) }

func (k privateKey) public() ed25519.PublicKey {
	return k.private().Public().(ed25519.PublicKey)
}

// decode reads KeysKey's bytes, strictly: an unknown field, a key of the wrong size, a missing
// time or a key ID that is not its key's is ErrUnreadable.
func decode(b []byte) (*document, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: %s is missing or empty", ErrUnreadable, KeysKey)
	}
	var d document
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreadable, KeysKey, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: more than one JSON value", ErrUnreadable, KeysKey)
	}
	check := func(what string, k privateKey) error {
		switch {
		case len(k.Seed) != ed25519.SeedSize:
			return fmt.Errorf("%w: the %s key's seed has %d bytes, want %d", ErrUnreadable, what, len(k.Seed), ed25519.SeedSize)
		case k.CreatedAt.IsZero():
			return fmt.Errorf("%w: the %s key has no createdAt", ErrUnreadable, what)
		}
		return nil
	}
	if err := check("signing", d.Signing); err != nil {
		return nil, err
	}
	if d.Next != nil {
		if err := check("next", *d.Next); err != nil {
			return nil, err
		}
	}
	for i, r := range d.Retired {
		switch {
		case len(r.PublicKey) != ed25519.PublicKeySize:
			return nil, fmt.Errorf("%w: retired key %d has %d bytes, want %d", ErrUnreadable, i, len(r.PublicKey), ed25519.PublicKeySize)
		case attestation.KeyID(r.PublicKey) != r.KeyID:
			return nil, fmt.Errorf("%w: retired key %d is named %q, and its key's ID is %q", ErrUnreadable, i, r.KeyID, attestation.KeyID(r.PublicKey))
		case r.RetiredAt.IsZero():
			return nil, fmt.Errorf("%w: retired key %q has no retiredAt", ErrUnreadable, r.KeyID)
		}
	}
	return &d, nil
}

func (d *document) encode() ([]byte, error) { return json.Marshal(d) }

// publicKeys are the keys the bundle publishes: the signing key, the next one, the retired ones.
func (d *document) publicKeys() []ed25519.PublicKey {
	keys := []ed25519.PublicKey{d.Signing.public()}
	if d.Next != nil {
		keys = append(keys, d.Next.public())
	}
	for _, r := range d.Retired {
		keys = append(keys, ed25519.PublicKey(r.PublicKey))
	}
	return keys
}

// Plan is what plan decided of the keys.
type Plan struct {
	doc *document
	// Changed says whether the keys differ from plan's input.
	Changed bool
	// Reasons say what changed, for the log.
	Reasons []string
	// Next is when the keys must be looked at again for time's sake: a rotation, the end of a
	// propagation. (A retired key that claims' statements name leaves on the claims' events.)
	Next time.Time
}

// plan decides what the keys must be at now; cur nil is no Secret. It is a pure function of its
// inputs (random only supplies keys; inUse says whether a claim's statement names a key ID).
//
//   - No Secret: a key is made and signs at once (there is nothing else to sign with).
//   - Rotation after the signing key was made, the next key is made and published; Propagation
//     after that it signs, and the previous signing key retires.
//   - A retired key stays published for Propagation after it retired, and after that for as long
//     as a claim's statement names it (a Bound claim's statement is handed to its runtime on
//     every acquire, for as long as the claim lives: claims have no maximum lifetime).
func plan(cur *document, p Policy, now time.Time, inUse func(keyID string) bool, random io.Reader) (*Plan, error) {
	now = now.UTC().Truncate(time.Second)
	out := &Plan{}
	newKey := func() (privateKey, error) {
		seed := make([]byte, ed25519.SeedSize)
		if _, err := io.ReadFull(random, seed); err != nil {
			return privateKey{}, fmt.Errorf("making an isolation signing key: %w", err)
		}
		return privateKey{Seed: seed, CreatedAt: now}, nil
	}
	if cur == nil {
		k, err := newKey()
		if err != nil {
			return nil, err
		}
		out.doc = &document{Signing: k}
		out.Changed = true
		out.Reasons = append(out.Reasons, "no Secret: made the first key, which signs at once")
		out.Next = k.CreatedAt.Add(p.Rotation)
		return out, nil
	}
	d := &document{Signing: cur.Signing, Next: cur.Next, Retired: slices.Clone(cur.Retired)}
	if d.Next != nil && !now.Before(d.Next.CreatedAt.Add(p.Propagation)) {
		pub := d.Signing.public()
		d.Retired = slices.Insert(d.Retired, 0, retiredKey{KeyID: attestation.KeyID(pub), PublicKey: pub, RetiredAt: now})
		d.Signing, d.Next = *d.Next, nil
		out.Reasons = append(out.Reasons, "the next key has been published for the propagation: it signs now, and the previous one retired")
	}
	if d.Next == nil && !now.Before(d.Signing.CreatedAt.Add(p.Rotation)) {
		k, err := newKey()
		if err != nil {
			return nil, err
		}
		d.Next = &k
		out.Reasons = append(out.Reasons, "the signing key is due for rotation: made the next key, published before it signs")
	}

	// Retired keys: kept for the propagation, then while a claim names them; never twice, and
	// never one that is the signing or the next key.
	live := []string{attestation.KeyID(d.Signing.public())}
	if d.Next != nil {
		live = append(live, attestation.KeyID(d.Next.public()))
	}
	kept := d.Retired[:0]
	for _, r := range d.Retired {
		switch {
		case slices.Contains(live, r.KeyID):
			out.Reasons = append(out.Reasons, fmt.Sprintf("retired key %s listed twice: dropped the copy", r.KeyID))
		case now.Before(r.RetiredAt.Add(p.Propagation)):
			kept = append(kept, r)
			live = append(live, r.KeyID)
			out.Next = earliest(out.Next, r.RetiredAt.Add(p.Propagation))
		case inUse(r.KeyID):
			kept = append(kept, r)
			live = append(live, r.KeyID)
		default:
			out.Reasons = append(out.Reasons, fmt.Sprintf("retired key %s: published for the propagation, and no claim's statement names it: no longer published", r.KeyID))
		}
	}
	d.Retired = kept
	if len(d.Retired) == 0 {
		d.Retired = nil
	}

	if d.Next != nil {
		out.Next = earliest(out.Next, d.Next.CreatedAt.Add(p.Propagation))
	} else {
		out.Next = earliest(out.Next, d.Signing.CreatedAt.Add(p.Rotation))
	}
	out.doc = d
	out.Changed = len(out.Reasons) > 0
	return out, nil
}

// earliest is the earlier of a and b, a zero a being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
