package sandboxdtest

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
)

// WarmMemberKey derives the key of member warm-<n> from a fixed operator key.
func WarmMemberKey(t testing.TB, n int) []byte {
	t.Helper()
	k, err := warmtoken.MemberKey([]byte(strings.Repeat("k", 32)), "team-a", fmt.Sprintf("warm-%d", n))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// AdoptionToken is a warm member's adoption token for the claim uid and tools.
func AdoptionToken(t testing.TB, key []byte, uid types.UID, tools ...string) string {
	t.Helper()
	tok, err := warmtoken.AdoptionToken(key, uid, tools)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
