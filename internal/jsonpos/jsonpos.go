// Package jsonpos places an offset of encoding/json's errors in the text they came
// from, for messages that say FILE:LINE:COL.
package jsonpos

import "bytes"

// LineCol returns the 1-based line and column (in bytes) of the byte at off in data;
// an off outside data is clamped to it. encoding/json's SyntaxError.Offset is just past
// the offending byte (pass Offset-1), UnmarshalTypeError.Offset at the value's start.
func LineCol(data []byte, off int64) (line, col int) {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}
