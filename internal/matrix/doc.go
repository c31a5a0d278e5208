// Package matrix holds redisync's combination tests (issue 18): the core
// promises of a lock, checked for every primitive × option × topology ×
// fault, over a pairwise covering set of those combinations. It has no
// code of its own; everything is in its tests (go test ./internal/matrix).
//
// The promises, checked in every cell:
//
//   - mutual exclusion: no two holds whose contexts are live at once
//     conflict (a Semaphore never has more permits held than it has);
//   - the holder is told first: a hold's context is done before another
//     holder can be granted what it held (checked together with the above:
//     the checker reads the others' contexts, then its own);
//   - every wait ends with its context (or its wait bound), within a
//     second, whatever Redis does, and rides out transient replies;
//   - nothing is left behind: right after the run, Redis holds nothing but
//     what stays by design (a fencing counter, a Semaphore's total);
//   - with WithFencing, a later holder's token is greater than every
//     earlier holder's;
//   - the lock is usable after the fault.
//
// Adding a primitive is adding one adapter (a primitive value, see
// adapters_test.go) to the primitives list: the pairwise set grows to cover
// it, and TestMatrixCoversAllPairs checks that it does.
//
// Beside the pairwise set, TestMatrix's resharding group runs every
// primitive with each option it takes (WithReplicaAck included) while its
// lock's slot is resharded: MIGRATING on its master and IMPORTING on
// another for a while, its keys moved one by one (ASK, TRYAGAIN), then
// assigned (issue 24). Its cells run at once, each on a slot of its own;
// holders also re-enter their holds, and, as nothing is lost in a
// resharding, no hold may be lost, no call may fail on the network and
// every release must succeed.
package matrix
