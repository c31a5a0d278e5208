package lua

// The scripts of the Election. Those that make terms have elect_term.lua
// (next_term) before them.
var (
	ElectCampaign = LoadWith("elect_term.lua", "elect_campaign.lua")
	ElectRenew    = Load("elect_renew.lua")
	ElectResign   = Load("elect_resign.lua")
	ElectLeader   = Load("elect_leader.lua")
)
