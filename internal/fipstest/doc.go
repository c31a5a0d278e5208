// Package fipstest holds the test that runs redisync under
// GODEBUG=fips140=only (FIPS 140-3 only mode, in which Go refuses SHA-1),
// against real redis-servers: a test binary of its own, so that no other
// test file can stop it from starting in that mode. It has no code.
package fipstest
