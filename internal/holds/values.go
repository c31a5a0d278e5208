package holds

import (
	"context"
	"fmt"
)

// WithValues returns a context that ends as ctx does (Done, Err, Deadline,
// and the callbacks of context.AfterFunc) and carries vals's values: a
// wait's context once the observer has given the values its commands
// carry (a trace's live span, for go-redis's hooks to parent them under).
// vals's own cancellation, if any, is ignored.
func WithValues(ctx, vals context.Context) context.Context {
	return &valuesCtx{Context: ctx, vals: vals}
}

type valuesCtx struct {
	context.Context
	vals context.Context
}

func (c *valuesCtx) Value(key any) any { return c.vals.Value(key) }

// AfterFunc makes contexts derived from c, and context.AfterFunc(c, f),
// follow c's end with no goroutine of their own: the context package asks
// for it when c's values do not lead to the cancelCtx that ends c.
func (c *valuesCtx) AfterFunc(f func()) func() bool { return context.AfterFunc(c.Context, f) }

func (c *valuesCtx) String() string { return fmt.Sprintf("%v.WithValues(%v)", c.Context, c.vals) }
