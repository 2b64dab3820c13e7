// Package record is what a session record is (docs/record.md): its entries, their canonical
// encoding, the hash chain, the operator's Ed25519 signatures of each entry and of the anchor,
// Verify (which says where a record was edited, dropped, reordered, appended, replayed or cut),
// the JSON lines export and the mapping of entries to OCSF events.
//
// It is pure and standard library only (hack/layout holds it to that): sandboxd, the operator
// and the CLI all import it.
package record
