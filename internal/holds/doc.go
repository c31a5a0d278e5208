// Package holds is the hold machinery of a Client: it turns a granted
// script into a hold (Grant), carries holds in contexts (Carried, Held,
// NewScope), re-enters and releases them under each hold's lock, waits
// between attempts for a wake-up or a bound (Await), and gives back what a
// call that failed or left early may have left in Redis (Undo and its
// kin, Sweep, Cleanup). A primitive describes itself with a Spec and its
// scripts as transport calls; the Machine does the rest.
//
// It is handed the layers below it (the lease Keeper, the notify Hub, the
// cohort Queue, the transport) and reports up only through the callbacks
// in Config. It imports nothing of the root package; the sentinel errors
// it returns are internal/errs's, which the root exports.
package holds
