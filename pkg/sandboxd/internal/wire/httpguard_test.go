package wire

import "testing"

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:80": true, "LOCALHOST": true, "a.localhost:1": true,
		"127.0.0.1": true, "127.1.2.3:8080": true, "[::1]:8080": true, "::1": true,
		"example.com": false, "10.0.0.1:80": false, "[::2]:1": false, "": false, "localhost.example.com": false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
