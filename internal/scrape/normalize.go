package scrape

import (
	"cmp"
	"errors"
	"hash/maphash"
	"math"
	"slices"
	"unsafe"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// errTooManySeries is returned by normalize when a scrape exceeds the
// per-target series limit.
var errTooManySeries = errors.New("too many series")

// maxCachedNames bounds the per-target name cache; a real replica exposes a
// few hundred names, so hitting this means something is generating names.
const maxCachedNames = 8192

// normalizer turns raw samples into canonical series.Groups. It keeps its
// scratch space between scrapes of the same target (one normalizer per
// target loop; not safe for concurrent use): the hot path allocates only the
// output.
type normalizer struct {
	aliases map[string]string
	names   map[string]*nameInfo
	seed    maphash.Seed

	index    map[uint64]int32 // series hash -> entries index
	overflow map[string]int32 // true hash collisions only, keyed by full key
	entries  []entry
	parts    []dpPart
	groups   []groupAcc
	labels   []series.Label // scratch arena for the entries' labels
	keyBuf   []byte
	kept     []series.Label // scratch for one sample's labels

	// reuse: the output is read only until the next normalize (the scrape
	// loop's Appender takes it so), so its arrays are reused, not garbage
	// every scrape.
	reuse      bool
	outLabels  []series.Label
	outSamples []series.Sample
	outGroups  []series.Group

	// plan is what the last normalize did with each sample, when it may be
	// applied to the next scrape (normalizeParsed).
	plan normPlan
}

// normPlan records where a normalize put each raw sample, so that the
// next scrape of the same series in the same order, which is nearly every
// scrape (a replica's series change only their values, and a fleet of one
// model exposes the same series), is normalized by combining its values as
// recorded (applyPlan): no name resolved, no label filtered, sorted or
// hashed. The entries, groups and dropped flags that normalize left stay as
// they are; only values and DP-rank parts are made again, by the same merge
// in the same order, so the output is what normalize would return, bit for
// bit (TestPlannedNormalizationIsNormalization).
//
// A scrape has the plan's series when each sample, position by position,
// normalizes as the recorded one did (alike): the same name, and the same
// labels but for the values of those normalize drops whatever they are
// (ignoredLabel), process ids above all, which differ between the replicas
// a pooled scraper reads in turn. Most samples are the very strings and
// label arrays recorded, which the parser's cache holds and never changes
// (textParser.fromCache): a plan is recorded only from such a parse, and as
// the plan refers to them their addresses are not reused, so equal
// addresses and lengths settle a sample without comparing its labels.
type normPlan struct {
	valid     bool
	maxSeries int
	names     []string
	labels    [][]series.Label
	steps     []planStep
}

// planStep is what normalize did with one raw sample.
type planStep struct {
	entry   int32  // the entry it went to
	dp      string // its dp_rank
	first   bool   // it made the entry (add), else merge
	percent bool   // a percent-valued hit rate, made a fraction above 1
}

// matches reports whether raw has the plan's series in the plan's order
// (see normPlan) and maxSeries is the plan's.
func (pl *normPlan) matches(raw []RawSample, maxSeries int) bool {
	if !pl.valid || pl.maxSeries != maxSeries || len(raw) != len(pl.steps) {
		return false
	}
	for i := range raw {
		rs := &raw[i]
		same := unsafe.StringData(rs.Name) == unsafe.StringData(pl.names[i]) && len(rs.Name) == len(pl.names[i]) &&
			unsafe.SliceData(rs.Labels) == unsafe.SliceData(pl.labels[i]) && len(rs.Labels) == len(pl.labels[i])
		if !same && !alike(rs.Name, rs.Labels, pl.names[i], pl.labels[i]) {
			return false
		}
	}
	return true
}

// alike reports whether two samples normalize alike: the same name and the
// same labels in the same order, but for the values of ignored labels.
func alike(name string, labels []series.Label, otherName string, other []series.Label) bool {
	if name != otherName || len(labels) != len(other) {
		return false
	}
	for i, l := range labels {
		if l.Name != other[i].Name || (l.Value != other[i].Value && !ignoredLabel(l.Name)) {
			return false
		}
	}
	return true
}

// ignoredLabel reports whether normalize drops the label whatever its
// value: which process and which TP, PP or MoE EP rank wrote a sample.
func ignoredLabel(name string) bool {
	switch name {
	case labelPID, labelTPRank, labelPPRank, labelMoEEPRank:
		return true
	}
	return false
}

// normalizeParsed is normalize of what parser's last Parse returned,
// applying the plan when it matches (normPlan), and recording one when the
// samples are the parser's cache's.
func (n *normalizer) normalizeParsed(raw []RawSample, maxSeries int, parser Parser) ([]series.Group, error) {
	if n.plan.matches(raw, maxSeries) {
		return n.applyPlan(raw), nil
	}
	tp, ok := parser.(*textParser)
	return n.run(raw, maxSeries, ok && tp.fromCache)
}

// applyPlan is normalize by the plan (see normPlan), which matches raw.
func (n *normalizer) applyPlan(raw []RawSample) []series.Group {
	n.parts = n.parts[:0]
	for i, st := range n.plan.steps {
		e := &n.entries[st.entry]
		v := raw[i].Value
		if st.percent && v > 1 {
			v /= 100
		}
		if st.first {
			// As add made it; its dp is the one add gave it.
			e.value, e.parts = v, -1
			continue
		}
		n.merge(e, st.dp, v)
	}
	return n.output()
}

// entry is one output series while its contributions are being combined.
type entry struct {
	group      int32
	start, end int32 // labels in normalizer.labels
	parts      int32 // head of this series' per-DP-rank list in normalizer.parts; -1 while one rank
	name       string
	info       *nameInfo
	dp         string  // dp_rank of the first contribution
	value      float64 // value of the first DP rank (max over its duplicates)
	dropped    bool    // shadowed by a legacy twin's current name or by a priority total
	priority   bool    // a per-priority part of a queue count
}

// dpPart is the value of one DP rank of a series, once it has several. The
// parts of all series live in one arena, linked per series, so fanned-out
// replicas cost no allocation per series.
type dpPart struct {
	dp    string
	value float64
	next  int32
}

// groupAcc accumulates one output group (one replica behind the target).
type groupAcc struct {
	worker      string
	models      []tally
	engineTypes []tally
	n           int
}

type tally struct {
	value string
	n     int
}

func newNormalizer() *normalizer {
	return &normalizer{
		aliases: legacyAliases(),
		names:   make(map[string]*nameInfo, 256),
		seed:    maphash.MakeSeed(),
		index:   make(map[uint64]int32, 1024),
	}
}

// normalize maps raw samples onto canonical groups:
//   - names: "sglang_" back to "sglang:", retired names to current ones;
//   - worker_addr splits groups; model_name/name and engine_type move to the
//     group; pid, tp_rank, pp_rank, moe_ep_rank and empty labels go;
//   - series equal after that within one dp_rank are copies (TP ranks, pids):
//     max, never sum; then DP ranks combine by sum, or by max for ratios;
//   - percent-valued cache_hit_rate becomes a fraction;
//   - a legacy gateway family's "route" label becomes its successor's
//     "endpoint";
//   - with priority scheduling, a queue count keeps its total (priority "")
//     and drops the per-priority breakdown, which would count every request
//     twice; a breakdown without a total is kept (it sums to the total);
//   - a worker address becomes a readable replica name (readableWorker).
//
// maxSeries > 0 bounds the number of output series (errTooManySeries).
func (n *normalizer) normalize(raw []RawSample, maxSeries int) ([]series.Group, error) {
	return n.run(raw, maxSeries, false)
}

// run is normalize, recording a plan of it when record is set (see
// normPlan) and forgetting the last one either way.
func (n *normalizer) run(raw []RawSample, maxSeries int, record bool) ([]series.Group, error) {
	n.reset(len(raw))
	pl := &n.plan
	pl.valid, pl.maxSeries = false, maxSeries
	pl.names, pl.labels, pl.steps = pl.names[:0], pl.labels[:0], pl.steps[:0]
	legacy, priorities := false, false

	for i := range raw {
		rs := &raw[i]
		info := n.resolve(rs.Name)

		var worker, model, engineType, dp string
		priority := false
		kept := n.kept[:0]
		for _, l := range rs.Labels {
			if l.Value == "" || ignoredLabel(l.Name) {
				// Empty is absent in Prometheus; the gateway pads missing
				// labels with "" when it merges engines.
				continue
			}
			switch l.Name {
			case labelWorkerAddr:
				worker = l.Value
			case labelModelName:
				model = l.Value
			case labelEngineType:
				engineType = l.Value
			case labelDPRank:
				dp = l.Value
			case labelLegacyRoute:
				if info.legacy {
					l.Name = labelEndpoint
				}
				kept = append(kept, l)
			case labelPriority:
				priority = priority || info.queueCount
				kept = append(kept, l)
			case labelLegacyName:
				if info.nameIsModel {
					if model == "" {
						model = l.Value
					}
					continue
				}
				kept = append(kept, l)
			default:
				kept = append(kept, l)
			}
		}
		sortLabels(kept)
		n.kept = kept

		g := n.group(worker)
		acc := &n.groups[g]
		if model != "" {
			acc.models = count(acc.models, model)
		}
		if engineType != "" {
			acc.engineTypes = count(acc.engineTypes, engineType)
		}

		v := rs.Value
		if info.percentHitRate && v > 1 {
			v /= 100
		}
		legacy = legacy || info.legacy
		priorities = priorities || priority

		h := n.hash(g, info.canonical, kept)
		idx, ok := n.lookup(h, g, info.canonical, kept)
		if !ok {
			if maxSeries > 0 && len(n.entries) >= maxSeries {
				return nil, errTooManySeries
			}
			idx = int32(len(n.entries))
			n.add(h, g, info, kept, dp, v)
			n.entries[idx].priority = priority
		} else {
			n.merge(&n.entries[idx], dp, v)
		}
		if record {
			pl.names, pl.labels = append(pl.names, rs.Name), append(pl.labels, rs.Labels)
			pl.steps = append(pl.steps, planStep{entry: idx, dp: dp, first: !ok, percent: info.percentHitRate})
		}
	}
	pl.valid = record

	if legacy {
		n.dropShadowedLegacy()
	}
	if priorities {
		n.dropPriorityBreakdowns()
	}
	return n.output(), nil
}

func (n *normalizer) reset(hint int) {
	clear(n.index)
	clear(n.overflow)
	n.entries = slices.Grow(n.entries[:0], hint)
	n.parts = n.parts[:0]
	n.groups = n.groups[:0]
	n.labels = n.labels[:0]
	if len(n.names) > maxCachedNames {
		clear(n.names)
	}
}

// resolve returns the cached nameInfo of an exposed name.
func (n *normalizer) resolve(raw string) *nameInfo {
	if info, ok := n.names[raw]; ok {
		return info
	}
	info := resolveName(raw, n.aliases)
	n.names[raw] = &info
	return &info
}

func (n *normalizer) group(worker string) int32 {
	for i := range n.groups {
		if n.groups[i].worker == worker {
			return int32(i)
		}
	}
	n.groups = append(n.groups, groupAcc{worker: worker})
	return int32(len(n.groups) - 1)
}

func count(ts []tally, v string) []tally {
	for i := range ts {
		if ts[i].value == v {
			ts[i].n++
			return ts
		}
	}
	return append(ts, tally{value: v, n: 1})
}

func (n *normalizer) hash(g int32, name string, ls []series.Label) uint64 {
	b := n.keyBuf[:0]
	b = append(b, byte(g), byte(g>>8), byte(g>>16), byte(g>>24))
	b = append(b, name...)
	for _, l := range ls {
		b = append(b, 0xff)
		b = append(b, l.Name...)
		b = append(b, 0xfe)
		b = append(b, l.Value...)
	}
	n.keyBuf = b
	return maphash.Bytes(n.seed, b)
}

// lookup finds the entry of a series. A 64-bit hash match is verified, and a
// genuine collision falls back to the overflow map keyed by the full key
// (still in keyBuf from hash).
func (n *normalizer) lookup(h uint64, g int32, name string, ls []series.Label) (int32, bool) {
	idx, ok := n.index[h]
	if !ok {
		return 0, false
	}
	if n.same(&n.entries[idx], g, name, ls) {
		return idx, true
	}
	idx, ok = n.overflow[string(n.keyBuf)]
	return idx, ok
}

func (n *normalizer) same(e *entry, g int32, name string, ls []series.Label) bool {
	return e.group == g && e.name == name && slices.Equal(n.labels[e.start:e.end], ls)
}

func (n *normalizer) add(h uint64, g int32, info *nameInfo, ls []series.Label, dp string, v float64) {
	idx := int32(len(n.entries))
	if _, taken := n.index[h]; taken {
		if n.overflow == nil {
			n.overflow = make(map[string]int32)
		}
		n.overflow[string(n.keyBuf)] = idx
	} else {
		n.index[h] = idx
	}
	start := int32(len(n.labels))
	n.labels = append(n.labels, ls...)
	n.entries = append(n.entries, entry{
		group: g, start: start, end: int32(len(n.labels)),
		parts: -1, name: info.canonical, info: info, dp: dp, value: v,
	})
	n.groups[g].n++
}

// merge adds another contribution to a series: a copy from the same DP
// rank (TP ranks, pids) keeps the max, another rank gets its own part.
func (n *normalizer) merge(e *entry, dp string, v float64) {
	if e.parts < 0 {
		if dp == e.dp {
			e.value = maxValue(e.value, v)
			return
		}
		n.parts = append(n.parts, dpPart{dp: e.dp, value: e.value, next: -1})
		e.parts = int32(len(n.parts) - 1)
	}
	for i := e.parts; i >= 0; i = n.parts[i].next {
		if p := &n.parts[i]; p.dp == dp {
			p.value = maxValue(p.value, v)
			return
		}
	}
	n.parts = append(n.parts, dpPart{dp: dp, value: v, next: e.parts})
	e.parts = int32(len(n.parts) - 1)
}

// final combines the DP ranks of a series: sum, or max for ratios.
func (n *normalizer) final(e *entry) float64 {
	if e.parts < 0 {
		return e.value
	}
	p := &n.parts[e.parts]
	v := p.value
	for i := p.next; i >= 0; i = n.parts[i].next {
		if e.info.maxOverDP {
			v = maxValue(v, n.parts[i].value)
		} else {
			v += n.parts[i].value
		}
	}
	return v
}

// maxValue is max that prefers a number over NaN: a NaN copy from one rank
// must not hide the value another rank reports.
func maxValue(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	case b > a:
		return b
	}
	return a
}

// dropShadowedLegacy removes series that arrived under a legacy name when
// the same group also exposes the canonical name (releases in transition
// emit both, and summing them would double count).
func (n *normalizer) dropShadowedLegacy() {
	type key struct {
		group int32
		name  string
	}
	current := make(map[key]bool)
	for i := range n.entries {
		if e := &n.entries[i]; !e.info.legacy {
			current[key{e.group, e.name}] = true
		}
	}
	for i := range n.entries {
		e := &n.entries[i]
		if e.info.legacy && current[key{e.group, e.name}] && !e.dropped {
			e.dropped = true
			n.groups[e.group].n--
		}
	}
}

// dropPriorityBreakdowns removes the per-priority parts of a queue count
// whose total (priority "", dropped as empty, so no priority label here) is
// exposed with the same other labels. SGLang writes both under one family
// (SchedulerMetricsCollector._log_gauge_queue_count): summing them, as
// every reader of a count does, would double the queue and the batch.
func (n *normalizer) dropPriorityBreakdowns() {
	type key struct {
		group int32
		name  string
		rest  string // the labels other than priority
	}
	rest := func(e *entry) string {
		var b []byte
		for _, l := range n.labels[e.start:e.end] {
			if l.Name == labelPriority {
				continue
			}
			b = append(b, l.Name...)
			b = append(b, 0xfe)
			b = append(b, l.Value...)
			b = append(b, 0xff)
		}
		return string(b)
	}
	totals := make(map[key]bool)
	for i := range n.entries {
		if e := &n.entries[i]; e.info.queueCount && !e.priority && !e.dropped {
			totals[key{e.group, e.name, rest(e)}] = true
		}
	}
	for i := range n.entries {
		e := &n.entries[i]
		if e.priority && !e.dropped && totals[key{e.group, e.name, rest(e)}] {
			e.dropped = true
			n.groups[e.group].n--
		}
	}
}

// output builds the groups. All samples share one label array and one
// sample array, sized exactly, so a scrape costs a handful of allocations,
// and none when the arrays are reused.
func (n *normalizer) output() []series.Group {
	total, nLabels := 0, 0
	for i := range n.entries {
		if e := &n.entries[i]; !e.dropped {
			total++
			nLabels += int(e.end - e.start)
		}
	}
	if total == 0 {
		return nil
	}
	labels := reuse(n.outLabels, nLabels, n.reuse)[:0]
	samples := reuse(n.outSamples, total, n.reuse)
	groups := reuse(n.outGroups, len(n.groups), n.reuse)
	if n.reuse {
		n.outLabels, n.outSamples, n.outGroups = labels, samples, groups
	}
	offset := 0
	for i := range n.groups {
		acc := &n.groups[i]
		groups[i] = series.Group{
			Worker:     series.WorkerAddress(acc.worker),
			Model:      mostFrequent(acc.models),
			EngineType: mostFrequent(acc.engineTypes),
			Samples:    samples[offset : offset : offset+acc.n],
		}
		offset += acc.n
	}
	for i := range n.entries {
		e := &n.entries[i]
		if e.dropped {
			continue
		}
		start := len(labels)
		labels = append(labels, n.labels[e.start:e.end]...)
		var ls series.Labels
		if len(labels) > start {
			ls = labels[start:len(labels):len(labels)]
		}
		g := &groups[e.group]
		g.Samples = append(g.Samples, series.Sample{Name: e.name, Labels: ls, Value: n.final(e)})
	}
	// Drop groups left empty by shadowing, and order the rest by
	// worker so consumers see a stable order.
	groups = slices.DeleteFunc(groups, func(g series.Group) bool { return len(g.Samples) == 0 })
	if len(groups) > 1 {
		slices.SortFunc(groups, func(a, b series.Group) int { return cmp.Compare(a.Worker, b.Worker) })
	}
	return groups
}

func mostFrequent(ts []tally) string {
	best := tally{}
	for _, t := range ts {
		if t.n > best.n {
			best = t
		}
	}
	return best.value
}

// reuse returns s resized to n when asked to and big enough, else a new
// array of n.
func reuse[T any](s []T, n int, ok bool) []T {
	if ok && cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// sortLabels is an insertion sort: label sets are a handful of entries and,
// coming from prometheus_client, almost always sorted already, so this beats
// sort.Slice and never allocates. Order matches series.Labels.Sort.
func sortLabels(ls []series.Label) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].Name < ls[j-1].Name; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// engineWorkers maps the address of every engine target to the target's
// name.
func engineWorkers(targets []Target) map[string]string {
	m := make(map[string]string)
	for _, t := range targets {
		if a := t.address(); t.Kind == KindEngine && a != "" {
			m[a] = t.Name
		}
	}
	return m
}

// withoutScrapedEngines drops the groups of a gateway's /engine_metrics whose
// worker is also scraped directly as an engine target: both are one replica,
// and it goes by the engine target's name. Feeding the gateway's copy too
// would make two replicas of one server (two pages for one incident) from
// the same numbers a few seconds apart.
func withoutScrapedEngines(groups []series.Group, engines map[string]string) []series.Group {
	if len(engines) == 0 {
		return groups
	}
	return slices.DeleteFunc(groups, func(g series.Group) bool {
		_, scraped := engines[g.Worker]
		return g.Worker != "" && scraped
	})
}
