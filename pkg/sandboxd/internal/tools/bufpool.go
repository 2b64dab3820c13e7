package tools

import (
	"bufio"
	"io"
	"sync"
)

// fileReaderSize is the buffer of the readers that Read and Grep read
// files through.
const fileReaderSize = 16 << 10

// fileReaders are reused buffered readers: a Read of a small file would
// otherwise allocate 16 KiB for a few bytes, and Grep as much per file.
var fileReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, fileReaderSize) }}

// getFileReader returns a buffered reader of r; put it back with
// putFileReader once done with it.
func getFileReader(r io.Reader) *bufio.Reader {
	br := fileReaders.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// putFileReader lets br be reused. Nothing of what it read may be used
// after (a line from ReadLine or Peek points into its buffer).
func putFileReader(br *bufio.Reader) {
	br.Reset(nil)
	fileReaders.Put(br)
}
