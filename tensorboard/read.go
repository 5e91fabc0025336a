package tensorboard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrCorrupt is wrapped by the errors ReadRecords and ReadEvents return for a record
// whose checksum does not match or an event that is not a valid protocol buffer.
var ErrCorrupt = errors.New("tensorboard: corrupt event file")

// ReadRecords reads TFRecord-framed records from r until EOF, verifying the masked
// CRC-32C of each length and each payload. It returns the payloads read before the
// first error; a file that ends inside a record (one still being written) gives an
// error wrapping io.ErrUnexpectedEOF, a checksum mismatch one wrapping ErrCorrupt.
func ReadRecords(r io.Reader) ([][]byte, error) {
	var records [][]byte
	var offset int64
	var head [12]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err == io.EOF {
			return records, nil
		} else if err != nil {
			return records, fmt.Errorf("tensorboard: record at offset %d: %w", offset, err)
		}
		if got, want := binary.LittleEndian.Uint32(head[8:]), maskedCRC(head[:8]); got != want {
			return records, fmt.Errorf("%w: record at offset %d: length checksum %#08x, want %#08x",
				ErrCorrupt, offset, got, want)
		}
		n := binary.LittleEndian.Uint64(head[:8])
		if n > math.MaxInt32 {
			return records, fmt.Errorf("%w: record at offset %d: length %d", ErrCorrupt, offset, n)
		}
		data := make([]byte, n+4)
		if _, err := io.ReadFull(r, data); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return records, fmt.Errorf("tensorboard: record at offset %d: %w", offset, err)
		}
		data, sum := data[:n], binary.LittleEndian.Uint32(data[n:])
		if want := maskedCRC(data); sum != want {
			return records, fmt.Errorf("%w: record at offset %d: data checksum %#08x, want %#08x",
				ErrCorrupt, offset, sum, want)
		}
		records = append(records, data)
		offset += int64(len(head)) + int64(n) + 4
	}
}

// Event is the part of a decoded TensorBoard Event that this package writes.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string  // set on a file's first event only
	Values      []Value // the summary's values, if the event holds a summary
}

// ValueKind says what a Value holds.
type ValueKind int

// The kinds of Value that ReadEvents decodes.
const (
	OtherValue  ValueKind = iota // a summary this package does not decode (image, histogram, ...)
	ScalarValue                  // a simple_value scalar, in Value.Scalar
	TextValue                    // a text plugin string tensor, in Value.Text
)

// Value is one decoded Summary.Value.
type Value struct {
	Tag    string
	Plugin string // the metadata's plugin_name, "" if none
	Kind   ValueKind
	Scalar float32 // for ScalarValue
	Text   string  // for TextValue
}

// ReadEvents reads an event file's records with ReadRecords and decodes each as an
// Event. On error it returns the events decoded before it.
func ReadEvents(r io.Reader) ([]Event, error) {
	records, rerr := ReadRecords(r)
	events := make([]Event, 0, len(records))
	for i, rec := range records {
		ev, err := decodeEvent(rec)
		if err != nil {
			return events, fmt.Errorf("%w: record %d: %v", ErrCorrupt, i, err)
		}
		events = append(events, ev)
	}
	return events, rerr
}

// walk calls fn for each field of an encoded message, with the field's raw value
// (for a length-delimited field, the bytes after the length).
func walk(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}

func wrongType(num protowire.Number, typ protowire.Type) error {
	return fmt.Errorf("field %d has wire type %d", num, typ)
}

func decodeEvent(b []byte) (Event, error) {
	var ev Event
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			x, _ := protowire.ConsumeFixed64(v)
			ev.WallTime = math.Float64frombits(x)
		case num == eventStep && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			ev.Step = int64(x)
		case num == eventFileVersion && typ == protowire.BytesType:
			ev.FileVersion = string(v)
		case num == eventSummary && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != summaryValue {
					return nil
				}
				if typ != protowire.BytesType {
					return wrongType(num, typ)
				}
				val, err := decodeValue(v)
				ev.Values = append(ev.Values, val)
				return err
			})
		case num == eventWallTime || num == eventStep || num == eventFileVersion || num == eventSummary:
			return wrongType(num, typ)
		}
		return nil
	})
	return ev, err
}

func decodeValue(b []byte) (Value, error) {
	var val Value
	var strings [][]byte
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == valueTag && typ == protowire.BytesType:
			val.Tag = string(v)
		case num == valueSimpleValue && typ == protowire.Fixed32Type:
			x, _ := protowire.ConsumeFixed32(v)
			val.Kind, val.Scalar = ScalarValue, math.Float32frombits(x)
		case num == valueMetadata && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == metadataPluginData && typ == protowire.BytesType {
					return walk(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
						if num == pluginDataName && typ == protowire.BytesType {
							val.Plugin = string(v)
						}
						return nil
					})
				}
				return nil
			})
		case num == valueTensor && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == tensorStringVal && typ == protowire.BytesType {
					strings = append(strings, v)
				}
				return nil
			})
		case num == valueTag || num == valueSimpleValue || num == valueTensor || num == valueMetadata:
			return wrongType(num, typ)
		}
		return nil
	})
	if val.Plugin == "text" && len(strings) == 1 {
		val.Kind, val.Text = TextValue, string(strings[0])
	}
	return val, err
}
