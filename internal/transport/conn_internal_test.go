package transport

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type ownCtx struct{ context.Context }

func (ownCtx) Done() <-chan struct{} { return make(chan struct{}) }

func TestStdContext(t *testing.T) {
	bg := context.Background()
	c1, cancel := context.WithCancel(bg)
	defer cancel()
	c2, cancel2 := context.WithTimeout(bg, time.Second)
	defer cancel2()
	assert.True(t, stdContext(c1))
	assert.True(t, stdContext(c2))
	assert.True(t, stdContext(context.WithValue(context.WithValue(c2, ctxKey{}, 1), ctxKey{}, 2)))
	assert.False(t, stdContext(bg))
	assert.False(t, stdContext(ownCtx{bg}))
	assert.False(t, stdContext(context.WithValue(ownCtx{bg}, ctxKey{}, 1)), "a value context over another kind")
	assert.False(t, stdContext(ownCtx{c1}))
}
