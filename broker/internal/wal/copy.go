package wal

import (
	"io"
	"os"
	"sync"
)

// copyBufs pools the 64 KiB buffers of the non-sendfile path. It is a cache
// of scratch memory, not state: nothing in it outlives a copyRange call.
var copyBufs = sync.Pool{New: func() any {
	b := make([]byte, 64<<10)
	return &b
}}

// copyRange copies n bytes of f from byte off to w with pread and Write.
func copyRange(w io.Writer, f *os.File, off int64, n int) (int, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	written := 0
	for written < n {
		chunk := buf[:min(len(buf), n-written)]
		m, err := f.ReadAt(chunk, off)
		if m > 0 {
			wm, werr := w.Write(chunk[:m])
			written += wm
			off += int64(wm)
			if werr != nil {
				return written, werr
			}
		}
		if err != nil && written < n {
			if err == io.EOF {
				return written, io.ErrUnexpectedEOF
			}
			return written, err
		}
	}
	return written, nil
}
