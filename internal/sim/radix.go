package sim

// radixCache models SGLang's RadixCache at the granularity that matters for
// the metrics: shared system-prompt nodes (keyed by prompt variant) and one
// leaf per finished/aborted request (keyed by content, so a retry of the same
// body can reuse it). Nodes referenced by running requests are locked;
// unlocked ones are evictable, least recently used first. Request leaves
// are touched once and so age out before the hot system prompts do.
type radixCache struct {
	nodes     map[uint64]*entry
	lru       entry // sentinel: lru.next is the most recent
	locked    int   // tokens in nodes with refs > 0
	evictable int   // tokens in nodes with refs == 0
}

type entry struct {
	key        uint64
	tokens     int
	refs       int
	prev, next *entry
}

func newRadixCache() *radixCache {
	c := &radixCache{nodes: map[uint64]*entry{}}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

func (c *radixCache) get(key uint64) *entry { return c.nodes[key] }

func (c *radixCache) unlink(e *entry) { e.prev.next, e.next.prev = e.next, e.prev }

func (c *radixCache) pushFront(e *entry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

func (c *radixCache) insert(key uint64, tokens int) *entry {
	if old := c.nodes[key]; old != nil {
		if old.refs > 0 || old.tokens >= tokens {
			return old
		}
		c.remove(old)
	}
	e := &entry{key: key, tokens: tokens}
	c.nodes[key] = e
	c.pushFront(e)
	c.evictable += tokens
	return e
}

func (c *radixCache) remove(e *entry) {
	c.unlink(e)
	delete(c.nodes, e.key)
	c.evictable -= e.tokens
}

func (c *radixCache) lock(e *entry) {
	if e.refs == 0 {
		c.evictable -= e.tokens
		c.locked += e.tokens
	}
	e.refs++
	c.unlink(e)
	c.pushFront(e)
}

func (c *radixCache) unlock(e *entry) {
	e.refs--
	if e.refs == 0 {
		c.locked -= e.tokens
		c.evictable += e.tokens
	}
}

// evict frees at least n tokens if it can, oldest unlocked nodes first.
func (c *radixCache) evict(n int) int {
	freed := 0
	for e := c.lru.prev; e != &c.lru && freed < n; {
		prev := e.prev
		if e.refs == 0 {
			freed += e.tokens
			c.remove(e)
		}
		e = prev
	}
	return freed
}
