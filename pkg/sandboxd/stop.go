package sandboxd

// The operator's stop (docs/nothing-lost.md, "The operator's stop"): POST /stop, with the claim's
// token, ends everything the container runs and says so, so that the operator may delete the pod
// at once and start the next one on its workspace without waiting for the kubelet to terminate
// it (about 3 s). After a stop sandboxd serves nothing but the probes (not ready) and /stop again;
// it exits when the kubelet stops it, as before.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
)

// stopTimeout bounds a stop: the calls in flight to return once cancelled, the processes to exit.
const stopTimeout = 10 * time.Second

// stopper runs the stop once; a second POST /stop answers what the first found.
type stopper struct {
	once   sync.Once
	done   chan struct{}
	answer sandboxstop.Response
	status int
	// stopAll stops the other processes (procgroup.StopNamespace; tests replace it).
	stopAll func(context.Context) (int, error)
}

func newStopper() *stopper {
	return &stopper{done: make(chan struct{}), stopAll: procgroup.StopNamespace}
}

// serveStop is POST /stop, behind the guard.
func (s *server) serveStop(w http.ResponseWriter, r *http.Request) {
	st := s.stopper
	st.once.Do(func() {
		go func() {
			defer close(st.done)
			st.status, st.answer = s.stop()
		}()
	})
	select {
	case <-st.done:
	case <-r.Context().Done():
		return // the stop goes on; the operator asks again or waits for the kubelet
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st.status)
	_ = json.NewEncoder(w).Encode(st.answer)
}

// stop ends what sandboxd runs, as a shutdown does (sessions and streams ended, calls cancelled,
// process groups killed), then waits for every tool call to return and holds the call gate so
// that none starts again, then kills every other process of the container and waits for them.
func (s *server) stop() (int, sandboxstop.Response) {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		return stopFailed(http.StatusInternalServerError, "failed", "ending the sessions and process groups: "+err.Error())
	}
	if _, err := s.gate.Enter(ctx, true); err != nil {
		return stopFailed(http.StatusInternalServerError, "failed", "waiting for the tool calls in flight to return: "+err.Error())
	}
	// The gate is never let go: no tool call runs again in this process. Every call has
	// returned and recorded itself: the log ends here, with its stopped entry, which the
	// operator reads before it deletes the pod (docs/record.md §2.6).
	if s.record != nil {
		s.record.Stop()
	}
	killed, err := s.stopper.stopAll(ctx)
	if errors.Is(err, procgroup.ErrNotInit) {
		return stopFailed(http.StatusConflict, "not_init", err.Error()+"; the pod must be left to the kubelet to stop")
	}
	if err != nil {
		return stopFailed(http.StatusInternalServerError, "failed", "stopping the container's processes: "+err.Error())
	}
	s.logger.Info("Stopped by the operator: no process of the container runs but sandboxd, no tool call runs", "killed", killed)
	return http.StatusOK, sandboxstop.Response{Stopped: true, Killed: killed}
}

func stopFailed(status int, code, message string) (int, sandboxstop.Response) {
	return status, sandboxstop.Response{Error: code, Message: message}
}
