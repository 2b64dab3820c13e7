package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=srec,categories=airlock
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=`.spec.claimName`
// +kubebuilder:printcolumn:name="Segment",type=integer,JSONPath=`.spec.segment`
// +kubebuilder:printcolumn:name="Entries",type=integer,JSONPath=`.spec.anchor.count`
// +kubebuilder:printcolumn:name="Sealed",type=boolean,JSONPath=`.spec.anchor.sealed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// SessionRecord is one segment of a claim's session record (docs/record.md §2.5), named
// <claim>-record-<8 hex of sha256(claim UID)>-<segment>: the record's entries as the operator
// signed them, and the record's anchor as of the segment's last write. Only the operator writes
// records; the API server itself keeps a segment append-only (the rules below), as defence in
// depth: whoever may delete and create records can still replace one, and `airlock record verify`
// is the check. A kind beyond SPEC's four (docs/decisions.md, "Session records are a kind of their
// own"). Records have no status: a segment is what it holds.
type SessionRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SessionRecordSpec `json:"spec"`
}

// SessionRecordSpec is one segment of a record. Its claim and number never change, its entries
// only grow by appending, and a sealed segment never changes again.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.anchor) || has(self.anchor)",message="a segment's anchor is never removed"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.anchor) || !has(self.anchor) || self.anchor.count >= oldSelf.anchor.count",message="a segment's anchor never counts fewer entries than before"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.anchor) || !has(oldSelf.anchor.sealed) || !oldSelf.anchor.sealed || (has(self.anchor) && self.anchor == oldSelf.anchor && self.entries == oldSelf.entries)",message="a sealed segment never changes: its anchor stays, and nothing is appended after the seal"
type SessionRecordSpec struct {
	// ClaimUID is the UID of the claim whose record this is (a claim of the same name later is
	// another record).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="claimUID is immutable"
	ClaimUID string `json:"claimUID"`
	// ClaimName is that claim's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="claimName is immutable"
	ClaimName string `json:"claimName"`
	// Segment is the segment's number in the record, from 0.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="segment is immutable"
	Segment int32 `json:"segment"`
	// Entries are the segment's entries, one canonical JSON line each (record.Entry.Line), each
	// ended by a newline: the very bytes the operator signed. At most 512 KiB (a segment is
	// created with its first entry, so never empty).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=524288
	// +kubebuilder:validation:XValidation:rule="self.startsWith(oldSelf)",message="entries are append-only: a new value must start with the old one"
	Entries string `json:"entries"`
	// Anchor is the record's signed anchor as of this segment's last write.
	// +optional
	Anchor *SessionRecordAnchor `json:"anchor,omitempty"`
	// Cursor is where the operator's reading of the sandbox's log stood then, so that a new
	// leader reads on from there.
	// +optional
	Cursor *SessionRecordCursor `json:"cursor,omitempty"`
}

// SessionRecordAnchor is record.Anchor: the signed statement of the record's count and head.
type SessionRecordAnchor struct {
	// V is the anchor's format version.
	// +required
	V int32 `json:"v"`
	// Claim is the claim's UID.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Claim string `json:"claim"`
	// Count is how many entries the record holds.
	// +required
	// +kubebuilder:validation:Minimum=0
	Count int64 `json:"count"`
	// Head is the hex SHA-256 of the last entry.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Head string `json:"head"`
	// Sealed says the record is complete.
	// +optional
	Sealed bool `json:"sealed,omitempty"`
	// Time is when the anchor was made (RFC 3339).
	// +required
	// +kubebuilder:validation:MaxLength=64
	Time string `json:"time"`
	// Key is the signing key's id.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Key string `json:"key"`
	// Sig is the base64 Ed25519 signature.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Sig string `json:"sig,omitempty"`
}

// SessionRecordCursor is where the collector stood: the sandbox log's boot and the last source
// entry taken.
type SessionRecordCursor struct {
	// Boot is the boot id of sandboxd's log.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Boot string `json:"boot,omitempty"`
	// After is the last source_seq taken.
	// +optional
	// +kubebuilder:validation:Minimum=0
	After int64 `json:"after,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SessionRecordList is a list of SessionRecords.
type SessionRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SessionRecord `json:"items"`
}
