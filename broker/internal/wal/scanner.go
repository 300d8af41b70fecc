package wal

import (
	"errors"
	"io"
)

// scanner reads consecutive records of one segment file between pos and end
// through a reusable buffer: one pread per buffer fill, no allocation per
// record.
type scanner struct {
	f    File
	pos  int64 // file position of the next record (= of buf[r])
	end  int64 // readable limit
	buf  []byte
	r, w int
}

const (
	scanBufSize     = 64 << 10
	headerReadAhead = 4 << 10
)

func (s *scanner) reset(f File, pos, end int64) {
	s.f, s.pos, s.end, s.r, s.w = f, pos, end, 0, 0
}

// fill makes at least n bytes available in buf[r:w]; the caller has checked
// that pos+n <= end.
func (s *scanner) fill(n int) error {
	if s.w-s.r >= n {
		return nil
	}
	if n > len(s.buf) || len(s.buf) < scanBufSize {
		nb := make([]byte, max(n, 2*len(s.buf), scanBufSize))
		s.w = copy(nb, s.buf[s.r:s.w])
		s.buf, s.r = nb, 0
	} else if s.r > 0 {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	for s.w-s.r < n {
		at := s.pos + int64(s.w-s.r)
		want := min(int64(len(s.buf)-s.w), s.end-at)
		m, err := s.f.ReadAt(s.buf[s.w:s.w+int(want)], at)
		s.w += m
		if s.w-s.r >= n {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ErrTornRecord
			}
			return err
		}
	}
	return nil
}

// next returns the next whole record (a view into buf) and its position.
// At exactly end it returns io.EOF. On a damaged record it returns the
// header it could decode (if any) and ErrTornRecord, ErrBadMagic,
// ErrChecksum or ErrUnsupportedVersion without advancing.
func (s *scanner) next() (header, []byte, int64, error) {
	pos := s.pos
	if pos >= s.end {
		return header{}, nil, pos, io.EOF
	}
	if s.end-pos < HeaderSize {
		return header{}, nil, pos, ErrTornRecord
	}
	if err := s.fill(HeaderSize); err != nil {
		return header{}, nil, pos, err
	}
	h := decodeHeader(s.buf[s.r:])
	total := h.size()
	if pos+total > s.end {
		return h, nil, pos, ErrTornRecord
	}
	if err := s.fill(int(total)); err != nil {
		return h, nil, pos, err
	}
	rec := s.buf[s.r : s.r+int(total)]
	if err := checkRecord(rec); err != nil {
		return h, rec, pos, err
	}
	s.r += int(total)
	s.pos += total
	return h, rec, pos, nil
}

// nextHeader returns the next record's header and position without reading
// or verifying key and payload: it is the zero-copy replay path.
func (s *scanner) nextHeader() (header, int64, error) {
	pos := s.pos
	if pos >= s.end {
		return header{}, pos, io.EOF
	}
	if s.end-pos < HeaderSize {
		return header{}, pos, ErrTornRecord
	}
	if s.w-s.r < HeaderSize {
		// Read a little ahead: the headers of small records that follow
		// come with it, saving a pread each.
		if s.buf == nil {
			s.buf = make([]byte, headerReadAhead)
		}
		want := min(int64(headerReadAhead), s.end-pos)
		s.r, s.w = 0, 0
		m, err := s.f.ReadAt(s.buf[:want], pos)
		s.w = m
		if m < HeaderSize {
			s.w = 0
			if err == nil || errors.Is(err, io.EOF) {
				err = ErrTornRecord
			}
			return header{}, pos, err
		}
	}
	h := decodeHeader(s.buf[s.r:])
	if h.magic != Magic {
		return h, pos, ErrBadMagic
	}
	total := h.size()
	if pos+total > s.end {
		return h, pos, ErrTornRecord
	}
	if s.w-s.r >= int(total) {
		s.r += int(total)
	} else {
		s.r, s.w = 0, 0
	}
	s.pos += total
	return h, pos, nil
}
