package detect

import (
	"fmt"
	"math"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ServerInfo is where a running SGLang server's current arguments are read,
// for steps that change one (the reference names both endpoints and no
// release where the name changed).
const ServerInfo = "/server_info (/get_server_info on older releases)"

// restartDrops says what a restart of the replica loses: the requests it
// holds, counted from the last queued and running gauges, and how to lose
// fewer. A detector that calls it lists both gauges in its reads.
func restartDrops(w Window) string {
	queued, okQ := w.Last(Sel(series.NumQueueReqs))
	running, okR := w.Last(Sel(series.NumRunningReqs))
	if !okQ || !okR {
		return "drops every queued and running request (take the replica out of rotation first, so it holds fewer)"
	}
	return fmt.Sprintf("drops the %s queued and running requests it holds now (%s queued, %s running; take it out of rotation first, so it holds fewer)",
		num(math.Round(queued+running)), num(math.Round(queued)), num(math.Round(running)))
}
