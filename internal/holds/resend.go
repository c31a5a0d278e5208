package holds

// GoneAt is what a release script answers when the last hold it releases
// was already gone from Redis: the hold was lost (forced by another
// process, lost with Redis's data, a key deleted). The transport never
// writes a release twice (it knows whether a call's bytes were written:
// one not written is sent again, one written whose reply was lost is not),
// so GoneAt is never the release finding what its own first write did.
const GoneAt = 3
