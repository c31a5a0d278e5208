// Package notify is a client's one subscription to Redis, shared by every
// waiter: a channel is subscribed while a local goroutine waits on it, and
// a message on it wakes as many of its waiters as the channel's policy
// says. What Redis has subscribed is read from its replies, never assumed:
// a waiter can tell whether it may have missed a message (a connection
// lost, a channel moved to another node, the primary switched: the
// subscription then moves to the new one, switch.go) and look again, and
// no wait relies on messages alone, so a lost one costs a delay, never a
// hang.
//
// It knows nothing of locks: the owner hands it the client, the pub/sub
// mode's resolution, and a hold-back rule for wake-ups (Config). It
// imports nothing of the module above it.
package notify
