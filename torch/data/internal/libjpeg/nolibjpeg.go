//go:build !cgo || nolibjpeg

package libjpeg

import "errors"

// Available reports whether Decode can decode: libjpeg-turbo is linked (cgo, and no
// build tag nolibjpeg).
const Available = false

// Decode is unavailable in this build (see Available).
func Decode(raw []byte, h Header, channels int, dst []byte) error {
	if err := checkDst(h, channels, dst); err != nil {
		return err
	}
	return errors.New("libjpeg: built without libjpeg (cgo off or build tag nolibjpeg)")
}
