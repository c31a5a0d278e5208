package lua

// The scripts of the CountDownLatch. Its keys (both in the name's slot):
//
//	KEYS[1]  the count, a string at the latch's name, while it counts
//	KEYS[2]  the round, "{tag}:latch-round:<name>": the identity of the
//	         round being counted, a string given by the TrySetCount that
//	         began it; it lives exactly as long as the count
//
// A round ends when its count is removed (the last CountDown, Delete): a
// waiter that finds no count, or another round, knows its round ended.
var (
	LatchSet       = Load("latch_set.lua")
	LatchRead      = Load("latch_read.lua")
	LatchCountDown = Load("latch_countdown.lua")
	LatchDelete    = Load("latch_delete.lua")
)
