package wire

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestWarmAdoptionRace: first requests with different valid tokens race; exactly one adopts,
// the others are refused, and only the winner's token is accepted afterwards. Run with -race.
func TestWarmAdoptionRace(t *testing.T) {
	key := sandboxdtest.WarmMemberKey(t, 0)
	logger, _ := ktesting.NewTestContext(t)
	var adopts atomic.Int32
	l := &warmLock{key: key, logger: logger, adopt: func(a warmtoken.Adoption) ([]string, []string, error) {
		adopts.Add(1)
		return a.Tools, nil, nil
	}}
	const n = 16
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = sandboxdtest.AdoptionToken(t, key, types.UID(fmt.Sprintf("claim-%d", i)), toolnames.Read)
	}
	start := make(chan struct{})
	won := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
			r.Header.Set("Authorization", "Bearer "+tokens[i])
			<-start
			won[i] = l.authorized(r)
		})
	}
	close(start)
	wg.Wait()
	winner := slices.Index(won, true)
	if winner < 0 || slices.Index(won[winner+1:], true) >= 0 || adopts.Load() != 1 {
		t.Fatalf("won = %v, %d adoptions: want exactly one of each", won, adopts.Load())
	}
	for i, tok := range tokens {
		r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if got := l.authorized(r); got != (i == winner) {
			t.Errorf("token %d after the race: authorized = %v, want %v", i, got, i == winner)
		}
	}
}
