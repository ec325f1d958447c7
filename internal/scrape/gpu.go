package scrape

import (
	"cmp"
	"slices"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// dcgm-exporter's label names (gpu-telemetry.md, "Series and labels").
const (
	dcgmLabelGPU       = "gpu"
	dcgmLabelUUID      = "UUID"
	dcgmLabelModel     = "modelName"
	dcgmLabelPCIBusID  = "pci_bus_id"
	dcgmLabelNamespace = "namespace"
	dcgmLabelPod       = "pod"
	dcgmLabelContainer = "container"
)

// dcgmNodeLabels name the GPU's node: dcgm-exporter says Hostname; some
// deployments relabel it.
var dcgmNodeLabels = [...]string{"Hostname", "node", "nodename"}

// dcgmDroppedLabel reports whether a label says nothing a reader needs
// that the group does not already hold: the device file, the driver
// version, the pod's UID, and the Xid's err_code and err_msg, which newer
// releases derive from the value (the code) and which would otherwise make
// each new Xid a new series.
func dcgmDroppedLabel(name string) bool {
	switch name {
	case "device", "DCGM_FI_DRIVER_VERSION", "pod_uid", "err_code", "err_msg":
		return true
	}
	return false
}

// gpuIdentity is what a sample's labels say about its GPU.
type gpuIdentity struct {
	index, uuid, node, model, pciBusID string
	namespace, pod, container          string
}

// key is the GPU's identity within a scrape: its UUID, else its node and
// index.
func (id *gpuIdentity) key() string {
	if id.uuid != "" || id.index == "" {
		return id.uuid
	}
	return id.node + "\x00" + id.index
}

// gpuAcc accumulates one GPU's group.
type gpuAcc struct {
	id      gpuIdentity
	samples []series.Sample
	legacy  []bool // by sample: it came under the older throttle name
	current map[string]bool
}

// fill takes what a sample says about the GPU that the group does not
// know yet.
func (g *gpuAcc) fill(id *gpuIdentity) {
	for _, f := range [...]struct {
		to   *string
		from string
	}{
		{&g.id.index, id.index}, {&g.id.uuid, id.uuid}, {&g.id.node, id.node}, {&g.id.model, id.model},
		{&g.id.pciBusID, id.pciBusID},
	} {
		if *f.to == "" {
			*f.to = f.from
		}
	}
	if g.id.pod == "" && id.pod != "" {
		g.id.namespace, g.id.pod, g.id.container = id.namespace, id.pod, id.container
	}
}

// worker is the GPU's name behind its target: gpu<index>, with the UUID
// added when another GPU of the target has the same index.
func (g *gpuAcc) worker(clash bool) string {
	switch {
	case g.id.index == "" && g.id.uuid == "":
		return ""
	case g.id.index == "":
		return g.id.uuid
	case clash && g.id.uuid != "":
		return "gpu" + g.id.index + "-" + g.id.uuid
	case clash:
		return g.id.node + "-gpu" + g.id.index
	}
	return "gpu" + g.id.index
}

// labels are the group's Labels: every identity field known.
func (g *gpuAcc) labels() map[string]string {
	out := make(map[string]string, 8)
	for k, v := range map[string]string{
		series.GPUNode: g.id.node, series.GPUIndex: g.id.index, series.GPUUUID: g.id.uuid,
		series.GPUModel: g.id.model, series.GPUPCIBusID: g.id.pciBusID,
		series.GPUNamespace: g.id.namespace, series.GPUPod: g.id.pod, series.GPUContainer: g.id.container,
	} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// normalizeGPU turns a dcgm-exporter's samples into one group per GPU,
// keyed by its UUID (its node and index when the UUID is missing), so that
// each GPU becomes a replica "<target>/gpu<index>" (see gpuAcc.worker). The
// GPU's identity and the pod holding it move from the samples to the
// group's Labels (series.GPU*); dcgmDroppedLabel's labels go; the older
// throttle name is read as the newer one, and dropped when a release in
// transition exposes both. Series equal after that are copies and keep the
// largest value. maxSeries > 0 bounds the output series (errTooManySeries).
func normalizeGPU(raw []RawSample, maxSeries int, aliases map[string]string) ([]series.Group, error) {
	var accs []*gpuAcc
	byKey := map[string]*gpuAcc{}
	type seriesKey struct{ gpu, series string }
	at := map[seriesKey]int{}
	n := 0
	for i := range raw {
		rs := &raw[i]
		name, legacy := rs.Name, false
		if to, ok := aliases[name]; ok {
			name, legacy = to, true
		}
		var id gpuIdentity
		var kept series.Labels
		for _, l := range rs.Labels {
			switch {
			case l.Value == "" || dcgmDroppedLabel(l.Name):
				// Empty is absent: a GPU no pod holds has pod="".
			case l.Name == dcgmLabelGPU:
				id.index = l.Value
			case l.Name == dcgmLabelUUID:
				id.uuid = l.Value
			case slices.Contains(dcgmNodeLabels[:], l.Name):
				if id.node == "" {
					id.node = l.Value
				}
			case l.Name == dcgmLabelModel:
				id.model = l.Value
			case l.Name == dcgmLabelPCIBusID:
				id.pciBusID = l.Value
			case l.Name == dcgmLabelNamespace:
				id.namespace = l.Value
			case l.Name == dcgmLabelPod:
				id.pod = l.Value
			case l.Name == dcgmLabelContainer:
				id.container = l.Value
			default:
				kept = append(kept, l)
			}
		}
		sortLabels(kept)
		key := id.key()
		g := byKey[key]
		if g == nil {
			g = &gpuAcc{current: map[string]bool{}}
			byKey[key] = g
			accs = append(accs, g)
		}
		g.fill(&id)
		if !legacy {
			g.current[name] = true
		}
		sk := seriesKey{key, name + kept.String()}
		if j, ok := at[sk]; ok {
			switch s := &g.samples[j]; {
			case g.legacy[j] && !legacy:
				s.Value, g.legacy[j] = rs.Value, false // the current name wins
			case g.legacy[j] == legacy:
				s.Value = maxValue(s.Value, rs.Value)
			}
			continue
		}
		if maxSeries > 0 && n >= maxSeries {
			return nil, errTooManySeries
		}
		n++
		at[sk] = len(g.samples)
		g.samples = append(g.samples, series.Sample{Name: name, Labels: kept, Value: rs.Value})
		g.legacy = append(g.legacy, legacy)
	}
	clashes := map[string]int{}
	for _, g := range accs {
		clashes[g.worker(false)]++
	}
	groups := make([]series.Group, 0, len(accs))
	for _, g := range accs {
		var samples []series.Sample
		for j, s := range g.samples {
			if !g.legacy[j] || !g.current[s.Name] {
				samples = append(samples, s)
			}
		}
		slices.SortFunc(samples, func(a, b series.Sample) int {
			return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Labels.String(), b.Labels.String()))
		})
		groups = append(groups, series.Group{
			Worker:  g.worker(clashes[g.worker(false)] > 1),
			Labels:  g.labels(),
			Samples: samples,
		})
	}
	slices.SortFunc(groups, func(a, b series.Group) int { return cmp.Compare(a.Worker, b.Worker) })
	return groups, nil
}
