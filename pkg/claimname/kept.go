package claimname

import (
	"crypto/sha256"
	"encoding/hex"
)

// keptRecordPrefix and keptRecordHashLen make the name of a kept workspace's record.
const (
	keptRecordPrefix  = "airlock-kept-"
	keptRecordHashLen = 20
)

// KeptRecordName is the name of the record (a Job) of the kept workspace directory dir: one per
// directory, "airlock-kept-" and the first 20 hex digits of sha256(dir).
func KeptRecordName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return keptRecordPrefix + hex.EncodeToString(sum[:])[:keptRecordHashLen]
}
