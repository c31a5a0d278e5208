package transport

// The room for calls in flight. A caller whose context ends after its
// call was written leaves at once, and the call stays in flight until its
// reply comes, to hand it to the give-back (late). On a stalled Redis (a
// paused process, a silent link) replies do not come, and such calls would
// pile up. So each connection has at most window calls written and
// unanswered, whether their callers wait or left: the bound is checked for
// every call as it is about to be written (conn.takeLocked), not once on
// entry, so a burst of callers (4,000 TryLocks on a stalled Redis) has at
// most window calls a connection written; the others wait in the queue as
// long as their contexts last and leave unsent (ErrNotSent). A batch (a
// renewal round, a MultiLock's slots) is written whole once the window
// has room for its first call, so that it stays one write. Dropped calls
// (their callers left before the write) are taken out of the queue as it
// grows (conn.compactLocked). What a stalled Redis costs a Client is then
// bounded: window calls per connection (nodeConns per primary, and
// waitConns more with WithReplicaAck), one reader goroutine per connection
// with calls in flight, and its live callers' own calls.
const window = 1024
