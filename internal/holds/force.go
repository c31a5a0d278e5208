package holds

import (
	"context"

	"github.com/redisync-go/redisync/internal/lease"
)

// ForceBy sends k, the script of a ForceUnlock of refs' locks, and returns
// its reply. Their holds in this process end first (see lease.Keeper.Force),
// and the window in which their grants are not trusted ends when the
// script answers: when ctx ends first, only once its late reply comes.
func (m *Machine) ForceBy(ctx context.Context, k call, refs ...lease.Ref) reply {
	dones := make([]func(), len(refs))
	for i, ref := range refs {
		dones[i] = m.wd.Force(ref)
	}
	done := func() {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i]()
		}
	}
	r := m.tr.Do(ctx, k, func(reply) { done() })
	if !r.Gone {
		done()
	}
	return r
}
