// Package lease keeps the holds of one client: each hold's context, its
// local deadline (a margin before Redis could let its lease expire, on a
// clock that counts a suspended machine's time) and its end, which
// cancels every context of the hold before anything else happens; and the
// Keeper, the table of live holds whose one goroutine renews their leases
// in pipelined batches, ends those Redis lost, and counts the ForceUnlocks
// that make a grant in flight untrustworthy.
//
// It knows locks only as a Ref and the transport calls that renew and
// release them; what happens when a hold ends (the give-back to Redis, the
// observer) is handed to it in Config. It imports nothing of the module
// above it.
package lease
