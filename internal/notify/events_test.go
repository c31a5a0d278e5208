package notify

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A connection's restored event never comes before its lost event: the
// reader may read a reply from the new connection while the writer that saw
// the old one fail is still on its way to telling it lost (its goroutine
// not yet scheduled past the state change). The observer sees lost, then
// restored, in that order.
func TestLostThenRestoredInOrder(t *testing.T) {
	var mu sync.Mutex
	var got []string
	release := make(chan struct{})
	p := &Hub{
		lostFn: func(string, error) {
			<-release // the writer's goroutine, slow to go on
			mu.Lock()
			got = append(got, "lost")
			mu.Unlock()
		},
		restoredFn: func(string, time.Duration) {
			mu.Lock()
			got = append(got, "restored")
			mu.Unlock()
		},
	}
	c := &subConn{}
	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		p.connDown(c, errors.New("write: i/o timeout"))
	}()
	for c.down.Load() == 0 { // the state has changed; the event is on its way
		time.Sleep(time.Millisecond)
	}
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		p.connUp(c) // a reply read from the new connection
	}()
	time.Sleep(50 * time.Millisecond)
	close(release)
	<-downDone
	<-upDone
	assert.Equal(t, []string{"lost", "restored"}, got)
}
