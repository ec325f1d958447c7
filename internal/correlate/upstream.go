package correlate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// upstream joins a gateway's group to the incident of a worker its
// failures come from: when a worker behind the gateway has its own
// incident (hung, down, cold, slow, overloaded, a GPU fault), the
// gateway's retries, open breakers and 5xx are that incident's
// consequences, one page named after the worker's cause. It stays the
// gateway's own incident when
//
//   - no failing worker is watched or has an incident: the gateway's page
//     names the workers and says which are not watched;
//   - every worker behind the gateway fails and every one's triage says
//     saturated: the fleet is short of capacity (overload), not one
//     worker at fault.
//
// A gateway failing more than one watched worker joins the most severe of
// their incidents and names the others.
func upstream(cfg Config, groups []Group, replicas []detect.Replica) []Group {
	addrs := workerAddresses(cfg, replicas)
	drop := make([]bool, len(groups))
	for i := range groups {
		u := upstreamOf(groups[i])
		if u == nil || len(u.Failing) == 0 {
			continue
		}
		var joined []int
		var unwatched []string
		for _, w := range u.Failing {
			name, ok := addrs[w.Worker]
			if !ok {
				unwatched = append(unwatched, w.Worker)
				continue
			}
			if j := groupOn(groups, drop, name); j >= 0 && j != i && !slices.Contains(joined, j) {
				joined = append(joined, j)
			}
		}
		if len(unwatched) > 0 {
			groups[i].Finding.Diagnosis = strings.TrimSpace(groups[i].Finding.Diagnosis + fmt.Sprintf(
				" This watchdog does not watch %s: add %s as a target to see %s own page.",
				strings.Join(unwatched, ", "), pronoun(len(unwatched), "it", "them"), pronoun(len(unwatched), "its", "their")))
		}
		if len(joined) == 0 || (len(u.Failing) >= u.Workers && saturated(pick(groups, joined))) {
			continue
		}
		slices.SortStableFunc(joined, func(a, b int) int { return int(groups[b].Finding.Severity) - int(groups[a].Finding.Severity) })
		j := joined[0]
		groups[j] = joinGateway(groups[j], groups[i], u, addrs, groups, joined[1:])
		drop[i] = true
	}
	out := groups[:0]
	for i, g := range groups {
		if !drop[i] {
			out = append(out, g)
		}
	}
	return out
}

// workerAddresses maps a worker address, as a gateway names it, to the
// replica serving there: the configured mapping first, then each engine
// replica's own address (or its name, where the source names replicas
// by address, as Prometheus' instance label does).
func workerAddresses(cfg Config, replicas []detect.Replica) map[string]string {
	m := make(map[string]string, len(replicas)+len(cfg.GatewayWorkers))
	for _, r := range replicas {
		if r.Kind == "gateway" {
			continue
		}
		if r.Address != "" {
			m[r.Address] = r.Name
		} else if _, ok := m[r.Name]; !ok {
			m[r.Name] = r.Name
		}
	}
	for url, target := range cfg.GatewayWorkers {
		m[series.WorkerAddress(url)] = target
	}
	return m
}

// upstreamOf is what the gateway's findings of g say of its workers.
func upstreamOf(g Group) *detect.Upstream {
	if g.Fleet {
		return nil
	}
	for _, m := range g.Members {
		if m.Upstream != nil {
			return m.Upstream
		}
	}
	return g.Finding.Upstream
}

// groupOn is the index of the replica's own group still standing, -1
// when it has none.
func groupOn(groups []Group, drop []bool, replica string) int {
	for i, g := range groups {
		if !drop[i] && !g.Fleet && g.Finding.Replica == replica {
			return i
		}
	}
	return -1
}

// joinGateway folds the gateway's group gw into the worker's group: its
// findings become consequences of the worker's cause, and the page says
// what the gateway did with the worker and which other workers fail.
func joinGateway(worker, gw Group, u *detect.Upstream, addrs map[string]string, groups []Group, others []int) Group {
	worker.Members = append(slices.Clone(worker.Members), gw.Members...)
	worker.Finding = withConsequences(worker.Members[0], worker.Members[1:])
	var here, elsewhere []string
	for _, w := range u.Failing {
		if addrs[w.Worker] == worker.Finding.Replica {
			here = append(here, w.String())
			continue
		}
		elsewhere = append(elsewhere, w.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, " The gateway %s sees this worker as %s", gw.Finding.Replica, strings.Join(here, "; "))
	if out := slices.ContainsFunc(u.Failing, func(w detect.UpstreamWorker) bool {
		return addrs[w.Worker] == worker.Finding.Replica && w.OutOfRotation()
	}); out {
		if u.Workers == 1 {
			b.WriteString(" and took it out of rotation, its only worker")
		} else {
			b.WriteString(" and took it out of rotation: its traffic lands on the other workers")
		}
		// Steps that say to drain the worker are already done: what is left
		// to act on first is whether the others carry its share.
		worker.Finding.Emergency = append([]string{rotatedOutStep(gw.Finding.Replica, u.Workers, len(elsewhere))}, worker.Finding.Emergency...)
	}
	b.WriteString(".")
	if len(elsewhere) > 0 {
		fmt.Fprintf(&b, " It also fails %s", strings.Join(elsewhere, "; "))
		var pages []string
		for _, o := range others {
			pages = append(pages, groups[o].Finding.Replica)
		}
		if len(pages) > 0 {
			fmt.Fprintf(&b, " (see the pages of %s)", strings.Join(pages, ", "))
		}
		b.WriteString(".")
	}
	worker.Finding.Diagnosis = strings.TrimSpace(worker.Finding.Diagnosis + b.String())
	return worker
}

// rotatedOutStep is the first step once the gateway took the worker out of
// rotation, of workers in all (0: not reported), failing others of them.
func rotatedOutStep(gateway string, workers, failing int) string {
	done := "The gateway " + gateway + " has already taken this worker out of rotation"
	switch others := workers - 1; {
	case workers == 0:
		return done + ": check that the other workers (queue, TTFT) carry its traffic."
	case others == 0:
		return done + " and has no other worker: every request through it fails until this worker is back."
	case failing > 0:
		return fmt.Sprintf("%s: its traffic lands on the other %d %s, and %d of them %s too.", done, others,
			pronoun(others, "worker", "workers"), failing, pronoun(failing, "fails", "fail"))
	default:
		return fmt.Sprintf("%s: check that the other %d %s (queue, TTFT) carry its traffic.", done, others, pronoun(others, "worker", "workers"))
	}
}

func pronoun(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
