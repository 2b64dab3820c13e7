package sandboxstop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestStop(t *testing.T) {
	tests := map[string]struct {
		status  int
		body    string
		wantErr string
	}{
		"stopped":             {status: 200, body: `{"stopped":true,"killed":3}`},
		"not init":            {status: 409, body: `{"stopped":false,"error":"not_init","message":"not PID 1"}`, wantErr: "409 not_init: not PID 1"},
		"200 but not stopped": {status: 200, body: `{"stopped":false}`, wantErr: "answered 200"},
		"not JSON":            {status: 404, body: `404 page not found`, wantErr: "not JSON"},
		"unauthorized":        {status: 401, body: `unauthorized`, wantErr: "answered 401"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != Path || r.Header.Get("Authorization") != "Bearer tok" {
					t.Errorf("request %s %s %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			r, err := NewClient().Stop(context.Background(), srv.URL, "tok")
			if tt.wantErr == "" {
				if err != nil || !r.Stopped || r.Killed != 3 {
					t.Fatalf("Stop = %+v, %v", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Stop error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestStopUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if _, err := NewClient().Stop(context.Background(), url, "tok"); err == nil {
		t.Fatal("Stop of a closed server succeeded")
	}
}
