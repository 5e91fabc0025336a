package tensorboard

import (
	"encoding/binary"
	"hash/crc32"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages written, from tensorboard/compat/proto/*.proto.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary

	summaryValue = 1 // repeated Summary.Value

	valueTag         = 1 // string
	valueSimpleValue = 2 // float
	valueTensor      = 8 // TensorProto
	valueMetadata    = 9 // SummaryMetadata

	metadataPluginData = 1 // SummaryMetadata.PluginData
	metadataDataClass  = 4 // DataClass enum

	pluginDataName = 1 // string

	tensorDtype     = 1 // DataType enum
	tensorShape     = 2 // TensorShapeProto
	tensorStringVal = 8 // repeated bytes

	shapeDim = 2 // repeated TensorShapeProto.Dim
	dimSize  = 1 // int64

	dtString        = 7 // DataType DT_STRING
	dataClassTensor = 2 // DataClass DATA_CLASS_TENSOR
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's checksum: CRC-32C rotated and offset so that a CRC of data
// that itself holds CRCs does not degenerate.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// appendRecord appends data in TFRecord framing: length, masked CRC of the length,
// data, masked CRC of the data, all little-endian.
func appendRecord(b, data []byte) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(b[start:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC(data))
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func eventHeader(wall float64, step int64) []byte {
	b := protowire.AppendTag(nil, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(wall))
	if step != 0 { // proto3 omits default values
		b = appendVarint(b, eventStep, uint64(step))
	}
	return b
}

func fileVersionEvent(wall float64) []byte {
	return appendString(eventHeader(wall, 0), eventFileVersion, FileVersion)
}

// summaryEvent wraps encoded Summary.Value fields (each already tagged as field 1 of
// Summary) in an Event.
func summaryEvent(wall float64, step int64, values []byte) []byte {
	return appendMessage(eventHeader(wall, step), eventSummary, values)
}

// scalarValue appends a Summary.Value{tag, simple_value} to a Summary.
func scalarValue(summary []byte, tag string, v float64) []byte {
	b := appendString(nil, valueTag, tag)
	b = protowire.AppendTag(b, valueSimpleValue, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, math.Float32bits(float32(v)))
	return appendMessage(summary, summaryValue, b)
}

// textValue appends the text plugin's Summary.Value to a Summary: a DT_STRING tensor
// of shape [1] holding text, with plugin_name "text" (its content, an empty
// TextPluginData, encodes to nothing).
func textValue(summary []byte, tag, text string) []byte {
	plugin := appendString(nil, pluginDataName, "text")
	meta := appendMessage(nil, metadataPluginData, plugin)
	meta = appendVarint(meta, metadataDataClass, dataClassTensor)

	dim := appendVarint(nil, dimSize, 1)
	shape := appendMessage(nil, shapeDim, dim)
	tensor := appendVarint(nil, tensorDtype, dtString)
	tensor = appendMessage(tensor, tensorShape, shape)
	tensor = appendString(tensor, tensorStringVal, text)

	b := appendString(nil, valueTag, tag)
	b = appendMessage(b, valueTensor, tensor)
	b = appendMessage(b, valueMetadata, meta)
	return appendMessage(summary, summaryValue, b)
}
