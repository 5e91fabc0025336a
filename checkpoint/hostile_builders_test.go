package checkpoint

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/big"
	"slices"
	"strings"
)

// This file builds the hostile inputs the budget tests and FuzzRead's seed corpus use:
// each is what an attacker would write by hand, which random mutation rarely reaches.

// pk assembles a pickle opcode by opcode.
type pk struct{ b []byte }

func newPk() *pk { return &pk{b: []byte{opProto, 2}} }

func (p *pk) op(ops ...byte) *pk { p.b = append(p.b, ops...); return p }

func (p *pk) str(s string) *pk {
	p.b = binary.LittleEndian.AppendUint32(append(p.b, opBinUnicode), uint32(len(s)))
	p.b = append(p.b, s...)
	return p
}

func (p *pk) int(v int32) *pk {
	p.b = append(p.b, opBinInt)
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(v))
	return p
}

func (p *pk) float(f float64) *pk {
	w := newPickler()
	w.float(f)
	p.b = append(p.b, w.buf[2:]...)
	return p
}

func (p *pk) long(v *big.Int) *pk {
	b := twosComplementLE(v)
	if len(b) < 256 {
		p.b = append(p.b, opLong1, byte(len(b)))
	} else {
		p.b = binary.LittleEndian.AppendUint32(append(p.b, opLong4), uint32(len(b)))
	}
	p.b = append(p.b, b...)
	return p
}

func (p *pk) put(i uint32) *pk {
	p.b = append(p.b, opLongBinPut)
	p.b = binary.LittleEndian.AppendUint32(p.b, i)
	return p
}

func (p *pk) get(i uint32) *pk {
	p.b = append(p.b, opLongBinGet)
	p.b = binary.LittleEndian.AppendUint32(p.b, i)
	return p
}

func (p *pk) global(module, name string) *pk {
	p.b = append(p.b, opGlobal)
	p.b = append(p.b, module+"\n"+name+"\n"...)
	return p
}

func (p *pk) stop() []byte { return append(p.b, opStop) }

// zrec is one record of a hand-built zip archive; dir lists the central-directory
// entries, each naming a record by index (so that several can alias one record).
type zrec struct {
	name string
	data []byte
}

type zdir struct {
	name string // "" : the record's own name
	rec  int
	// at, when not 0, is the local header offset to list instead of the record's (its
	// name and size still the record's).
	at uint32
}

// rawZip writes stored records and a central directory exactly as given.
func rawZip(recs []zrec, dir []zdir) []byte {
	var buf bytes.Buffer
	le := binary.LittleEndian
	offs := make([]uint32, len(recs))
	for i, r := range recs {
		offs[i] = uint32(buf.Len())
		var h [30]byte
		le.PutUint32(h[0:], 0x04034b50)
		le.PutUint16(h[4:], 20)
		le.PutUint32(h[14:], crc32.ChecksumIEEE(r.data))
		le.PutUint32(h[18:], uint32(len(r.data)))
		le.PutUint32(h[22:], uint32(len(r.data)))
		le.PutUint16(h[26:], uint16(len(r.name)))
		buf.Write(h[:])
		buf.WriteString(r.name)
		buf.Write(r.data)
	}
	cd := buf.Len()
	for _, d := range dir {
		r := recs[d.rec]
		name := d.name
		if name == "" {
			name = r.name
		}
		var h [46]byte
		le.PutUint32(h[0:], 0x02014b50)
		le.PutUint16(h[4:], 20)
		le.PutUint16(h[6:], 20)
		le.PutUint32(h[16:], crc32.ChecksumIEEE(r.data))
		le.PutUint32(h[20:], uint32(len(r.data)))
		le.PutUint32(h[24:], uint32(len(r.data)))
		le.PutUint16(h[28:], uint16(len(name)))
		le.PutUint32(h[42:], offs[d.rec])
		if d.at != 0 {
			le.PutUint32(h[42:], d.at)
		}
		buf.Write(h[:])
		buf.WriteString(name)
	}
	var e [22]byte
	le.PutUint32(e[0:], 0x06054b50)
	le.PutUint16(e[8:], uint16(len(dir)))
	le.PutUint16(e[10:], uint16(len(dir)))
	le.PutUint32(e[12:], uint32(buf.Len()-cd))
	le.PutUint32(e[16:], uint32(cd))
	buf.Write(e[:])
	return buf.Bytes()
}

// archiveOf is a torch.save-like archive of the given records (names below the root
// "archive/"), each listed once, with a version record.
func archiveOf(recs ...zrec) []byte {
	recs = append(slices.Clone(recs), zrec{"version", []byte("3\n")})
	dir := make([]zdir, len(recs))
	for i := range recs {
		recs[i].name = "archive/" + recs[i].name
		dir[i] = zdir{rec: i}
	}
	return rawZip(recs, dir)
}

// sharedStringPickle is a list of refs references to one string of size bytes: about
// size+5·refs bytes that expand to size·refs.
func sharedStringPickle(size, refs int) []byte {
	p := newPk().str(string(bytes.Repeat([]byte("a"), size))).put(0).op(opEmptyList, opMark)
	for range refs {
		p.get(0)
	}
	return p.op(opAppends).stop()
}

// laughsPickle is the "billion laughs": list k holds list k-1 twice, levels deep.
func laughsPickle(levels int) []byte {
	p := newPk().str("lol").put(0)
	for i := 1; i <= levels; i++ {
		p.op(opEmptyList, opMark).get(uint32(i - 1)).get(uint32(i - 1)).op(opAppends).put(uint32(i))
	}
	return p.stop()
}

// sharedKeyPickle sets one shared string of size bytes as the key of dicts dicts: every
// use hashes the whole key.
func sharedKeyPickle(size, dicts int) []byte {
	p := newPk().str(string(bytes.Repeat([]byte("k"), size))).put(0).op(opEmptyList, opMark)
	for range dicts {
		p.op(opEmptyDict).get(0).op(opNone, opSetItem)
	}
	return p.op(opAppends).stop()
}

// tupleKeyPickle nests a tuple key levels deep, each level holding the previous one
// twice (its normalised form doubles per level), and uses it as a key.
func tupleKeyPickle(levels int) []byte {
	p := newPk().op(opNone).put(0)
	for i := 1; i <= levels; i++ {
		p.get(uint32(i - 1)).get(uint32(i - 1)).op(opTuple2).put(uint32(i))
	}
	return p.op(opPop, opEmptyDict).get(uint32(levels)).op(opNone, opSetItem).stop()
}

// tinyValuesPickle is a list of n one-byte values of the given opcode (EMPTY_DICT, NONE).
func tinyValuesPickle(op byte, n int) []byte {
	p := newPk().op(opEmptyList, opMark)
	p.b = append(p.b, bytes.Repeat([]byte{op}, n)...)
	return p.op(opAppends).stop()
}

// aliasedZip lists one storage record under refs directory entries of the same name.
func aliasedZip(size, refs int) []byte {
	recs := []zrec{{"archive/data.pkl", tensorPickleBytes(uint64(size/4), uint64(size/4))},
		{"archive/data/0", make([]byte, size)}, {"archive/version", []byte("3\n")}}
	dir := []zdir{{rec: 0}, {rec: 2}}
	for range refs {
		dir = append(dir, zdir{rec: 1})
	}
	return rawZip(recs, dir)
}

// nestedZip hides the local header of a second record inside the data of the first, and
// lists both: the same bytes would be read twice.
func nestedZip() []byte {
	inner := zrec{"archive/data/1", make([]byte, 64)}
	innerBytes := rawZip([]zrec{inner}, nil)
	innerBytes = innerBytes[:len(innerBytes)-22] // the record alone
	pkl := tensorPickleBytes(2, 2)
	recs := []zrec{{"archive/data.pkl", pkl}, {"archive/data/0", innerBytes}, {"archive/version", []byte("3\n")}, inner}
	at := uint32(30 + len(recs[0].name) + len(pkl) + 30 + len(recs[1].name))
	return rawZip(recs, []zdir{{rec: 0}, {rec: 1}, {rec: 2}, {rec: 3, at: at}})
}

// dupPickleZip holds two data.pkl records: the first calls posix.system, the second is
// harmless.
func dupPickleZip() []byte {
	evil := newPk().global("posix", "system").str("echo pwned").op(opTuple1, opReduce).stop()
	good := newPk().op(opEmptyDict).str("a").int(1).op(opSetItem).stop()
	return archiveOf(zrec{"data.pkl", evil}, zrec{"data.pkl", good})
}

func tensorPickleBytes(numel, size uint64) []byte { return []byte(tensorPickle(numel, size)) }

// legacyPrefix is a legacy file's first three pickles: magic number, protocol, sys info.
func legacyPrefix() []byte {
	magic, _ := new(big.Int).SetString(legacyMagic, 10)
	out := newPk().long(magic).stop()
	out = append(out, newPk().op(opBinInt2, 0xe9, 0x03).stop()...) // 1001
	out = append(out, newPk().op(opEmptyDict).str("little_endian").op(opNewTrue, opSetItem).stop()...)
	return out
}

// legacyTensorPickle is a legacy object pickle: one float32 tensor over storage key
// "0" of numel elements, viewed as size elements.
func legacyTensorPickle(key string, numel, size int32) []byte {
	return newPk().global("torch._utils", "_rebuild_tensor_v2").op(opMark, opMark).
		str("storage").global("torch", "FloatStorage").str(key).str("cpu").int(numel).op(opNone, opTuple, opBinPersID).
		int(0).int(size).op(opTuple1).int(1).op(opTuple1, opNewFalse).global("collections", "OrderedDict").
		op(opEmptyTuple, opReduce, opTuple, opReduce).stop()
}

// legacyFile is a complete legacy checkpoint of one tensor of n float32 zeros; keys is
// the storage key list pickle's content.
func legacyFile(n int32, keys ...string) []byte { return legacyFileBlocks(n, len(keys), keys...) }

// legacyFileBlocks is legacyFile with blocks storage data blocks, whatever the keys.
func legacyFileBlocks(n int32, blocks int, keys ...string) []byte {
	out := append(legacyPrefix(), legacyTensorPickle("0", n, n)...)
	kp := newPk().op(opEmptyList, opMark)
	for _, k := range keys {
		kp.str(k)
	}
	out = append(out, kp.op(opAppends).stop()...)
	for range blocks {
		out = binary.LittleEndian.AppendUint64(out, uint64(n))
		out = append(out, make([]byte, 4*n)...)
	}
	return out
}

// safetensorsOf is a safetensors file with the given header and data.
func safetensorsOf(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), data...)
}

// hostileSeeds returns one input of each hostile class, small enough for the fuzzer.
func hostileSeeds() map[string][]byte {
	var manyEntries bytes.Buffer
	manyEntries.WriteString("{")
	for i := range 100 {
		if i > 0 {
			manyEntries.WriteString(",")
		}
		manyEntries.WriteString(`"t` + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)) + `":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}`)
	}
	manyEntries.WriteString("}")
	zeroStride := newPk().global("torch._utils", "_rebuild_tensor_v2").op(opMark, opMark).
		str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(1).op(opTuple, opBinPersID).
		int(0).op(opMark).int(1<<30).int(1<<30).op(opTuple).op(opMark).int(0).int(0).op(opTuple).op(opNewFalse).
		global("collections", "OrderedDict").op(opEmptyTuple, opReduce, opTuple, opReduce).stop()
	return map[string][]byte{
		"shared string":   archiveOf(zrec{"data.pkl", sharedStringPickle(1024, 256)}),
		"laughs":          archiveOf(zrec{"data.pkl", laughsPickle(40)}),
		"shared key":      archiveOf(zrec{"data.pkl", sharedKeyPickle(1024, 256)}),
		"tuple key":       archiveOf(zrec{"data.pkl", tupleKeyPickle(40)}),
		"huge int key":    archiveOf(zrec{"data.pkl", newPk().op(opEmptyDict).long(new(big.Int).Lsh(big.NewInt(1), 8*300)).op(opNone, opSetItem).stop()}),
		"tiny values":     archiveOf(zrec{"data.pkl", tinyValuesPickle(opEmptyDict, 1024)}),
		"aliased records": aliasedZip(1024, 16),
		"nested record":   nestedZip(),
		"duplicate pkl":   dupPickleZip(),
		"legacy endless":  append(legacyPrefix(), newPk().op(opBinUnicode, 0xf0, 0xff, 0xff, 0xff).b...),
		"legacy oversize": append(append(legacyPrefix(), legacyTensorPickle("0", 1<<30, 1)...), newPk().op(opEmptyList).stop()...),
		"legacy twice":    legacyFile(4, "0", "0"),
		"st many":         safetensorsOf(manyEntries.String(), nil),
		"st huge shape":   safetensorsOf(`{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, nil),
		"st deep shape":   safetensorsOf(`{"w":{"dtype":"F32","data_offsets":[0,0],"shape":[`+strings.Repeat("0,", 1100)+`0]}}`, nil),
		"st escapes":      safetensorsOf(`{"\ud83d\ude00\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"k\u00e9":"v"}}`, []byte{7}),
		"zero stride":     archiveOf(zrec{"data.pkl", zeroStride}, zrec{"data/0", make([]byte, 4)}),
	}
}

// genFile is a file generated on demand: prefix, count units of width w each (unit
// writes unit i), then suffix. ReadAt renders only the bytes asked for, so a 100 MB
// hostile file costs the test that reads it no memory.
type genFile struct {
	prefix, suffix []byte
	w, count       int64
	unit           func(i int64, b []byte)
}

func (g *genFile) Size() int64 { return int64(len(g.prefix)) + g.w*g.count + int64(len(g.suffix)) }

func (g *genFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	u := make([]byte, g.w)
	for n < len(p) {
		at := off + int64(n)
		mid := int64(len(g.prefix)) + g.w*g.count
		switch {
		case at >= g.Size():
			return n, io.EOF
		case at < int64(len(g.prefix)):
			n += copy(p[n:], g.prefix[at:])
		case at < mid:
			i := (at - int64(len(g.prefix))) / g.w
			g.unit(i, u)
			n += copy(p[n:], u[(at-int64(len(g.prefix)))%g.w:])
		default:
			n += copy(p[n:], g.suffix[at-mid:])
		}
	}
	return n, nil
}

// safetensorsGen is a header-only safetensors file whose header is exactly header
// bytes: prefix, as many units as fit, spaces, suffix.
func safetensorsGen(header int64, prefix, suffix string, w int64, unit func(i int64, b []byte)) *genFile {
	count := (header - int64(len(prefix)) - int64(len(suffix))) / w
	pad := header - int64(len(prefix)) - int64(len(suffix)) - count*w
	hl := binary.LittleEndian.AppendUint64(nil, uint64(header))
	return &genFile{prefix: append(hl, prefix...), suffix: append(bytes.Repeat([]byte(" "), int(pad)), suffix...),
		w: w, count: count, unit: unit}
}

// manyDimsSafetensors is a header of the given size giving one tensor as many
// dimensions as fit ("0," each: 50 million in 100 MB).
func manyDimsSafetensors(header int64) *genFile {
	return safetensorsGen(header, `{"w":{"dtype":"F32","data_offsets":[0,0],"shape":[`, `0]}}`, 2,
		func(_ int64, b []byte) { copy(b, "0,") })
}

// manyEntriesSafetensors is a header of the given size listing as many empty tensors
// as fit (1.8 million in 100 MB), each named by five base-36 digits.
func manyEntriesSafetensors(header int64) *genFile {
	const entry = `"#####":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`
	return safetensorsGen(header, "{", `"end":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, int64(len(entry)),
		func(i int64, b []byte) {
			copy(b, entry)
			for j := 5; j >= 1; j-- {
				b[j] = "0123456789abcdefghijklmnopqrstuvwxyz"[i%36]
				i /= 36
			}
		})
}

// nestedSharePickle is one string of size bytes under levels of lists, each list holding
// fan references to the one below (memo reuse): about size bytes in the file, size·fan^levels
// when expanded.
func nestedSharePickle(size, fan, levels int) []byte {
	p := newPk().str(string(bytes.Repeat([]byte("s"), size))).put(0)
	for l := 1; l <= levels; l++ {
		p.op(opEmptyList, opMark)
		for range fan {
			p.get(uint32(l - 1))
		}
		p.op(opAppends).put(uint32(l))
	}
	return p.stop()
}
