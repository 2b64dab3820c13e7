package wire

// growStackBytes is the stack GrowStack gives a tool call's goroutine.
const growStackBytes = 16 << 10

// GrowStack grows the calling goroutine's stack at once to hold a tool
// call, while the stack is still shallow.
//
// The SDK runs every tools/call on a new goroutine, which starts with a
// small stack; decoding and validating the arguments (jsonschema's
// validation recurses), the tool and encoding its result then grow it
// two or three times over, each time copying the stack and adjusting every
// frame on it: 14% of sandboxd's CPU time on a small Read (profile of
// BenchmarkToolCall/sse/Read/sessions=1). A frame of growStackBytes makes
// the runtime grow the stack once, to fit it, where the goroutine has few
// frames to copy. The frame stays on the stack: lastByte only reads it.
//
//go:noinline
func GrowStack() byte {
	var frame [growStackBytes]byte
	return lastByte(frame[:])
}

//go:noinline
func lastByte(b []byte) byte { return b[len(b)-1] }
