package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// The zip directory is parsed here rather than with archive/zip, because a checkpoint
// reader must see exactly the records torch's reader (miniz) sees and refuse whatever
// the two could read differently: the end record must be the last one in the file and
// end it, the central directory must sit where that record says (no "base offset"
// guessing), each directory entry must point at a local header of the same name, and no
// two records may overlap, so no byte of the file is ever read as part of two records
// (directory aliasing would otherwise multiply the cost of reading a file).

// zipEntry is one central-directory entry, checked against its local header.
type zipEntry struct {
	name           string
	flags, method  uint16
	compSize, size uint64
	headerOff      int64
	dataOff        int64
}

const (
	zipEndLen      = 22
	zipEnd64LocLen = 20
	zipEnd64Len    = 56
	zipDirLen      = 46
	zipLocalLen    = 30
	zipEntryCost   = 384 // a zipEntry, its sorted copy, its folded name and its map entry
)

func readAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readZipDir returns the entries of the zip archive r of size bytes, in directory order.
func readZipDir(r io.ReaderAt, size int64, b *budget) ([]zipEntry, error) {
	if size < zipEndLen {
		return nil, errors.New("too short for a zip archive")
	}
	tailLen := min(size, zipEndLen+0xffff)
	if err := b.alloc(tailLen); err != nil {
		return nil, err
	}
	tail := make([]byte, tailLen)
	if err := readAt(r, tail, size-tailLen); err != nil {
		return nil, err
	}
	// The last end-of-directory signature, as miniz finds it; its comment must end the file.
	i := bytes.LastIndex(tail[:len(tail)-zipEndLen+4], []byte("PK\x05\x06"))
	if i < 0 {
		return nil, errors.New("no end of central directory record")
	}
	end := tail[i:]
	if int(binary.LittleEndian.Uint16(end[20:])) != len(end)-zipEndLen {
		return nil, errors.New("the end of central directory record does not end the file")
	}
	endOff := size - tailLen + int64(i)
	le := binary.LittleEndian
	if le.Uint16(end[4:]) != 0 || le.Uint16(end[6:]) != 0 || le.Uint16(end[8:]) != le.Uint16(end[10:]) {
		return nil, errors.New("multi-disk zip archives are not supported")
	}
	entries, dirSize, dirOff := uint64(le.Uint16(end[10:])), uint64(le.Uint32(end[12:])), uint64(le.Uint32(end[16:]))
	dirEnd := endOff
	if endOff >= zipEnd64LocLen {
		var loc [zipEnd64LocLen]byte
		if err := readAt(r, loc[:], endOff-zipEnd64LocLen); err != nil {
			return nil, err
		}
		if string(loc[:4]) == "PK\x06\x07" {
			recOff := le.Uint64(loc[8:])
			if le.Uint32(loc[4:]) != 0 || le.Uint32(loc[16:]) > 1 || recOff > uint64(endOff-zipEnd64LocLen-zipEnd64Len) {
				return nil, errors.New("invalid zip64 end of central directory locator")
			}
			var rec [zipEnd64Len]byte
			if err := readAt(r, rec[:], int64(recOff)); err != nil {
				return nil, err
			}
			if string(rec[:4]) != "PK\x06\x06" || le.Uint64(rec[4:])+12 != uint64(endOff-zipEnd64LocLen)-recOff {
				return nil, errors.New("invalid zip64 end of central directory record")
			}
			if le.Uint32(rec[16:]) != 0 || le.Uint32(rec[20:]) != 0 || le.Uint64(rec[24:]) != le.Uint64(rec[32:]) {
				return nil, errors.New("multi-disk zip archives are not supported")
			}
			// The zip64 values replace the saturated 32-bit ones and must agree with the rest.
			e64, s64, o64 := le.Uint64(rec[32:]), le.Uint64(rec[40:]), le.Uint64(rec[48:])
			if (entries != 0xffff && entries != e64) || (dirSize != 0xffffffff && dirSize != s64) || (dirOff != 0xffffffff && dirOff != o64) {
				return nil, errors.New("zip64 and zip end of central directory records disagree")
			}
			entries, dirSize, dirOff = e64, s64, o64
			dirEnd = int64(recOff)
		}
	}
	if dirOff > uint64(dirEnd) || dirSize != uint64(dirEnd)-dirOff {
		return nil, errors.New("the central directory is not where the end record places it")
	}
	if entries > dirSize/zipDirLen {
		return nil, fmt.Errorf("%d directory entries cannot fit in %d bytes", entries, dirSize)
	}
	if err := b.alloc(int64(dirSize) + int64(entries)*zipEntryCost); err != nil {
		return nil, err
	}
	if err := b.step(int64(dirSize) + int64(entries)*64); err != nil {
		return nil, err
	}
	dir := make([]byte, dirSize)
	if err := readAt(r, dir, int64(dirOff)); err != nil {
		return nil, err
	}
	out := make([]zipEntry, 0, entries)
	p := dir
	for range entries {
		if len(p) < zipDirLen || string(p[:4]) != "PK\x01\x02" {
			return nil, errors.New("invalid central directory entry")
		}
		e := zipEntry{flags: le.Uint16(p[8:]), method: le.Uint16(p[10:]),
			compSize: uint64(le.Uint32(p[20:])), size: uint64(le.Uint32(p[24:])),
			headerOff: int64(le.Uint32(p[42:]))}
		nameLen, extraLen, commentLen := int(le.Uint16(p[28:])), int(le.Uint16(p[30:])), int(le.Uint16(p[32:]))
		disk := uint32(le.Uint16(p[34:]))
		if len(p) < zipDirLen+nameLen+extraLen+commentLen {
			return nil, errors.New("central directory entry extends past the directory")
		}
		e.name = string(p[zipDirLen : zipDirLen+nameLen])
		extra := p[zipDirLen+nameLen : zipDirLen+nameLen+extraLen]
		if err := e.zip64(extra, &disk); err != nil {
			return nil, fmt.Errorf("zip entry %q: %w", e.name, err)
		}
		if disk != 0 {
			return nil, errors.New("multi-disk zip archives are not supported")
		}
		p = p[zipDirLen+nameLen+extraLen+commentLen:]
		out = append(out, e)
	}
	if len(p) != 0 {
		return nil, errors.New("central directory holds more than its entries")
	}
	// One buffer for the local headers, as long as the longest name needs (a fixed
	// 64 KiB array would escape to the heap through the io.ReaderAt, uncharged).
	longest := 0
	for _, e := range out {
		longest = max(longest, len(e.name))
	}
	if err := b.alloc(int64(zipLocalLen + longest)); err != nil {
		return nil, err
	}
	local := make([]byte, zipLocalLen+longest)
	for i := range out {
		e := &out[i]
		if e.headerOff > int64(dirOff)-zipLocalLen {
			return nil, fmt.Errorf("zip entry %q: local header outside the records", e.name)
		}
		hdr := local[:zipLocalLen+len(e.name)]
		if err := readAt(r, hdr, e.headerOff); err != nil {
			return nil, fmt.Errorf("zip entry %q: %w", e.name, err)
		}
		if string(hdr[:4]) != "PK\x03\x04" {
			return nil, fmt.Errorf("zip entry %q: no local header at offset %d", e.name, e.headerOff)
		}
		if int(le.Uint16(hdr[26:])) != len(e.name) || string(hdr[zipLocalLen:]) != e.name {
			return nil, fmt.Errorf("zip entry %q: the local header names another file", e.name)
		}
		e.dataOff = e.headerOff + zipLocalLen + int64(len(e.name)) + int64(le.Uint16(hdr[28:]))
		if e.compSize > uint64(int64(dirOff)-e.dataOff) || e.dataOff > int64(dirOff) {
			return nil, fmt.Errorf("zip entry %q: data extends past the records", e.name)
		}
	}
	byOff := slices.Clone(out)
	slices.SortFunc(byOff, func(a, b zipEntry) int { return int(max(min(a.headerOff-b.headerOff, 1), -1)) })
	for i := 1; i < len(byOff); i++ {
		prev := byOff[i-1]
		if prev.dataOff+int64(prev.compSize) > byOff[i].headerOff {
			return nil, fmt.Errorf("zip entries %q and %q overlap (two directory entries for one record)", prev.name, byOff[i].name)
		}
	}
	return out, nil
}

// zip64 applies a zip64 extended-information extra field: the 64-bit values of the
// saturated 32-bit fields, in their fixed order.
func (e *zipEntry) zip64(extra []byte, disk *uint32) error {
	le := binary.LittleEndian
	for len(extra) >= 4 {
		id, n := le.Uint16(extra), int(le.Uint16(extra[2:]))
		if len(extra) < 4+n {
			return errors.New("truncated extra field")
		}
		f := extra[4 : 4+n]
		extra = extra[4+n:]
		if id != 1 {
			continue
		}
		next := func(w int) (uint64, error) {
			if len(f) < w {
				return 0, errors.New("truncated zip64 extra field")
			}
			var v uint64
			if w == 8 {
				v = le.Uint64(f)
			} else {
				v = uint64(le.Uint32(f))
			}
			f = f[w:]
			return v, nil
		}
		var err error
		if e.size == 0xffffffff {
			if e.size, err = next(8); err != nil {
				return err
			}
		}
		if e.compSize == 0xffffffff {
			if e.compSize, err = next(8); err != nil {
				return err
			}
		}
		if e.headerOff == 0xffffffff {
			off, err := next(8)
			if err != nil {
				return err
			}
			if off > 1<<62 {
				return errors.New("invalid zip64 offset")
			}
			e.headerOff = int64(off)
		}
		if *disk == 0xffff {
			d, err := next(4)
			if err != nil {
				return err
			}
			*disk = uint32(d)
		}
	}
	if e.size == 0xffffffff || e.compSize == 0xffffffff {
		// Saturated without a zip64 field: refuse rather than guess, as readers differ.
		return errors.New("saturated size without a zip64 extra field")
	}
	return nil
}
