package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of tokenizers (models/bpe): a word (one piece of the
// pre-tokenized text) starts as one symbol per character and adjacent symbols merge, the
// pair of lowest merge rank first.
type bpe struct {
	vocab    map[string]int32
	idTokens idTable
	// merges maps a pair of symbol ids (left<<32 | right) to its rank and the id of the
	// merged token.
	merges map[uint64]mergeTo

	unk          int32 // -1: no unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	// byteIDs[b] is the id of the byte-fallback token <0xBB>, -1 when absent.
	byteIDs [256]int32

	cache wordCache
}

type mergeTo struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// maxCachedWord matches tokenizers' cache: words of 256 bytes or more are not cached
// (one long word would evict many short ones).
const maxCachedWord = 256

// wordModel is the model of a tokenizer.json: BPE, Unigram or WordPiece.
type wordModel interface {
	// encodeWord appends the ids of one pre-tokenized word to dst.
	encodeWord(dst []int64, w string) []int64
	// wordTokens appends the tokens of w with their byte ranges in w, for EncodeOffsets
	// (BPE has its own path there).
	wordTokens(dst []wordToken, w string) []wordToken
	// tables returns the vocabulary and the id-to-token table.
	tables() (map[string]int32, *idTable)
}

// wordToken is a token of a word and its byte range in the word.
type wordToken struct {
	id         int32
	start, end int
}

func (m *bpe) tables() (map[string]int32, *idTable) { return m.vocab, &m.idTokens }

// wordTokens is not used: EncodeOffsets follows BPE's merges itself.
func (m *bpe) wordTokens(dst []wordToken, w string) []wordToken { panic("tokenizer: bpe.wordTokens") }

// encodeWord appends the ids of one pre-tokenized word to dst.
func (m *bpe) encodeWord(dst []int64, w string) []int64 {
	if m.ignoreMerges {
		// Llama 3: a word that is itself a token is that token, whatever the merges say.
		if id, ok := m.vocab[w]; ok {
			return append(dst, int64(id))
		}
	}
	if len(w) < maxCachedWord {
		if ids, ok := m.cache.get(w); ok {
			for _, id := range ids {
				dst = append(dst, int64(id))
			}
			return dst
		}
	}
	sc := mergePool.Get().(*mergeScratch)
	ids := m.mergeWord(sc, w)
	if len(w) < maxCachedWord {
		m.cache.put(w, append([]int32(nil), ids...))
	}
	for _, id := range ids {
		dst = append(dst, int64(id))
	}
	putMergeScratch(sc)
	return dst
}

var mergePool = sync.Pool{New: func() any { return new(mergeScratch) }}

// putMergeScratch returns sc to the pool unless a long word grew it: the pool does not
// keep a long line's memory.
func putMergeScratch(sc *mergeScratch) {
	if cap(sc.syms) <= 1<<16 {
		mergePool.Put(sc)
	}
}

// symbol is one symbol of a word being merged; prev and next link the live symbols,
// size is the byte length it covers (0 once merged into its left neighbour).
type symbol struct {
	id         int32
	prev, next int32
	size       int32
}

// mergeItem is a candidate merge: the pair (left, right) starting at symbol pos, which
// merges into id. key orders the candidates as tokenizers does: by rank, then position.
type mergeItem struct {
	key         uint64 // rank<<32 | pos
	id          int32
	left, right int32
}

func newItem(rank, pos, id, left, right int32) mergeItem {
	return mergeItem{key: uint64(uint32(rank))<<32 | uint64(uint32(pos)), id: id, left: left, right: right}
}

func (it mergeItem) pos() int32 { return int32(uint32(it.key)) }

type mergeScratch struct {
	syms []symbol
	heap []mergeItem
	out  []int32
}

func (s *mergeScratch) add(id int32, size int) {
	n := int32(len(s.syms))
	prev := int32(-1)
	if n > 0 {
		s.syms[n-1].next = n
		prev = n - 1
	}
	s.syms = append(s.syms, symbol{id: id, prev: prev, next: -1, size: int32(size)})
}

// mergeWord is tokenizers' BPE::merge_word followed by Word::merge_all (without
// dropout): the character-to-symbol step with its unk and byte-fallback rules, then
// merges popped from a min-heap ordered by (rank, position).
func (m *bpe) mergeWord(sc *mergeScratch, w string) []int32 {
	// A word has at most one symbol a byte: size the slices once (a long word would
	// otherwise allocate each about five times over as append grows it).
	if cap(sc.syms) < len(w) {
		sc.syms = make([]symbol, 0, len(w))
		sc.heap = make([]mergeItem, 0, len(w))
		sc.out = make([]int32, 0, len(w))
	}
	sc.syms = sc.syms[:0]
	unkID, unkLen := int32(-1), 0
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		first, last := i == 0, i+n == len(w)
		s := w[i : i+n]
		if (m.prefix != "" && !first) || (m.suffix != "" && last) {
			if !first {
				s = m.prefix + s
			}
			if last {
				s = s + m.suffix
			}
		}
		i += n
		if id, ok := m.vocab[s]; ok {
			if unkID >= 0 {
				sc.add(unkID, unkLen)
				unkID = -1
			}
			sc.add(id, n)
			continue
		}
		if m.byteFallback && m.allBytes(s) {
			// As tokenizers does, a pending unk is not flushed before the byte tokens.
			for k := 0; k < len(s); k++ {
				sc.add(m.byteIDs[s[k]], 1)
			}
			continue
		}
		if m.unk >= 0 {
			switch {
			case unkID >= 0 && m.fuseUnk:
				unkLen += n
			case unkID >= 0:
				sc.add(unkID, unkLen)
				unkID, unkLen = m.unk, n
			default:
				unkID, unkLen = m.unk, n
			}
		}
		// Without an unk token an unknown character is dropped, as in tokenizers.
	}
	if unkID >= 0 {
		sc.add(unkID, unkLen)
	}
	m.mergeAll(sc)
	sc.out = sc.out[:0]
	for _, s := range sc.syms {
		if s.size != 0 {
			sc.out = append(sc.out, s.id)
		}
	}
	return sc.out
}

func (m *bpe) allBytes(s string) bool {
	for k := 0; k < len(s); k++ {
		if m.byteIDs[s[k]] < 0 {
			return false
		}
	}
	return true
}

func (m *bpe) mergeAll(sc *mergeScratch) {
	syms := sc.syms
	sc.heap = sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if mt, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			sc.heap = append(sc.heap, newItem(mt.rank, int32(i), mt.id, syms[i].id, syms[i+1].id))
		}
	}
	sc.heapify()
	for len(sc.heap) > 0 {
		top := sc.pop()
		pos := top.pos()
		cur := &syms[pos]
		if cur.size == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// A stale entry: the pair at pos changed since it was queued. tokenizers checks
		// that the pair now there still merges into the same id; when the pair is the
		// one queued it does, without a lookup.
		if cur.id != top.left || right.id != top.right {
			if mt, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mt.id != top.id {
				continue
			}
		}
		cur.id = top.id
		cur.size += right.size
		cur.next = right.next
		syms[nextPos].size = 0
		if right.next >= 0 && int(right.next) < len(syms) {
			syms[right.next].prev = pos
		}
		if cur.prev >= 0 {
			if mt, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				sc.push(newItem(mt.rank, cur.prev, mt.id, syms[cur.prev].id, cur.id))
			}
		}
		if cur.next >= 0 && int(cur.next) < len(syms) {
			if mt, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				sc.push(newItem(mt.rank, pos, mt.id, cur.id, syms[cur.next].id))
			}
		}
	}
}

// The candidates are in a 4-ary min-heap on key (as tokenizers' QuaternaryHeap): long
// words (a whole Llama 2 paragraph is one word) keep thousands of them.

func (s *mergeScratch) push(it mergeItem) {
	s.heap = append(s.heap, it)
	s.up(len(s.heap) - 1)
}

func (s *mergeScratch) up(i int) {
	h := s.heap
	it := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if h[p].key <= it.key {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = it
}

func (s *mergeScratch) down(i int) {
	h := s.heap
	n := len(h)
	it := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		best := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if h[k].key < h[best].key {
				best = k
			}
		}
		if h[best].key >= it.key {
			break
		}
		h[i] = h[best]
		i = best
	}
	h[i] = it
}

func (s *mergeScratch) heapify() {
	if len(s.heap) < 2 {
		return
	}
	for i := (len(s.heap) - 2) / 4; i >= 0; i-- {
		s.down(i)
	}
}

func (s *mergeScratch) pop() mergeItem {
	h := s.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	s.heap = h[:n]
	if n > 0 {
		s.down(0)
	}
	return top
}

// idTable maps ids to tokens: a slice when the ids are dense (they always are in real
// files), a map otherwise.
type idTable struct {
	dense  []string
	has    []bool
	sparse map[int32]string
}

func newIDTable(vocab map[string]int32) idTable {
	maxID := int32(-1)
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	var t idTable
	if int64(maxID) < 2*int64(len(vocab))+1024 {
		t.dense = make([]string, maxID+1)
		t.has = make([]bool, maxID+1)
		for tok, id := range vocab {
			// Two tokens with one id: tokenizers keeps an arbitrary one; keep the
			// smaller string so that the choice at least does not vary between runs.
			if t.has[id] && t.dense[id] < tok {
				continue
			}
			t.dense[id], t.has[id] = tok, true
		}
		return t
	}
	t.sparse = make(map[int32]string, len(vocab))
	for tok, id := range vocab {
		if old, ok := t.sparse[id]; ok && old < tok {
			continue
		}
		t.sparse[id] = tok
	}
	return t
}

func (t *idTable) get(id int64) (string, bool) {
	if id < 0 || id > 1<<31-1 {
		return "", false
	}
	if t.sparse != nil {
		s, ok := t.sparse[int32(id)]
		return s, ok
	}
	if id >= int64(len(t.dense)) || !t.has[id] {
		return "", false
	}
	return t.dense[id], true
}

// wordCache caches the ids of words, as tokenizers' BPE cache does: a fixed capacity,
// and once full it stops inserting. It is sharded so that many encoding goroutines
// rarely wait on one lock.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 16
	cachePerShard = 1024
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func newWordCache() wordCache {
	return wordCache{seed: maphash.MakeSeed()}
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]int32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	s := c.shard(w)
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string][]int32)
	}
	if len(s.m) < cachePerShard {
		// Clone: w may be a slice of a long text that the cache must not keep alive.
		s.m[strings.Clone(w)] = ids
	}
	s.mu.Unlock()
}
