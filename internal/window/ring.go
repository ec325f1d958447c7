package window

// ring holds the newest points of one sequence, addressed by an absolute
// sequence number: the point pushed first has seq first, the next first+1,
// and so on. It grows by doubling up to a cap, then overwrites its oldest
// point, so memory follows the points actually held and never exceeds the
// cap. The zero value is an empty ring.
type ring[T any] struct {
	buf   []T
	start int    // index in buf of the point with seq first
	n     int    // points held
	first uint64 // seq of the oldest point held
}

// end is the seq the next pushed point gets.
func (r *ring[T]) end() uint64 { return r.first + uint64(r.n) }

// push appends v as seq r.end(), dropping the oldest point when the ring
// already holds limit points.
func (r *ring[T]) push(v T, limit int) {
	if r.n == len(r.buf) {
		if len(r.buf) < limit {
			r.grow(limit)
		} else {
			// Full at the cap: overwrite the oldest point.
			r.buf[r.start] = v
			r.start = (r.start + 1) % len(r.buf)
			r.first++
			return
		}
	}
	r.buf[(r.start+r.n)%len(r.buf)] = v
	r.n++
}

func (r *ring[T]) grow(limit int) {
	size := 2 * len(r.buf)
	if size < 4 {
		size = 4
	}
	if size > limit {
		size = limit
	}
	buf := make([]T, size)
	for i := 0; i < r.n; i++ {
		buf[i] = r.buf[(r.start+i)%len(r.buf)]
	}
	r.buf, r.start = buf, 0
}

// at returns the point with the given seq, ok=false when it is not held.
func (r *ring[T]) at(seq uint64) (T, bool) {
	if seq < r.first || seq >= r.end() {
		var zero T
		return zero, false
	}
	return r.buf[(r.start+int(seq-r.first))%len(r.buf)], true
}

// dropBefore forgets every point with a seq below seq.
func (r *ring[T]) dropBefore(seq uint64) {
	if seq <= r.first {
		return
	}
	if seq >= r.end() {
		r.restart(seq)
		return
	}
	k := int(seq - r.first)
	r.start = (r.start + k) % len(r.buf)
	r.n -= k
	r.first = seq
}

// restart empties the ring (keeping its buffer) so that the next push gets
// seq first.
func (r *ring[T]) restart(first uint64) {
	r.start, r.n, r.first = 0, 0, first
}
