package backtest

import (
	"errors"
	"io"

	"github.com/sglang-watchdog/sglang-watchdog/internal/recording"
)

// Recording is a Source over a recording of `watchdog record`.
func Recording(r *recording.Reader) Source { return recordingSource{r} }

type recordingSource struct{ r *recording.Reader }

func (s recordingSource) Next() (Step, bool, error) {
	e, err := s.r.Next()
	if errors.Is(err, io.EOF) {
		return Step{}, false, nil
	}
	if err != nil {
		return Step{}, false, err
	}
	return Step{Scrape: e.Scrape, Removed: e.Removed, Evaluate: e.Evaluate}, true, nil
}
