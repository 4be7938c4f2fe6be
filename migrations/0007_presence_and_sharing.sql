-- The client (MCP client name) an agent was last embodied through, for the
-- lobby to show; set only by the substrate's Embody, NULL for agents made
-- with a token. Owned by the substrate, like the rest of agents.
ALTER TABLE agents ADD COLUMN client_name text;

-- When a user's membership of a room began or last changed role. Open MCP
-- sessions whose consent allowed "new rooms shared with me" widen to the
-- memberships shared with the user (invited_by set) after the session
-- began. Owned by the lobby. Existing rows date from their creation.
ALTER TABLE smcp_user_rooms ADD COLUMN shared_at timestamptz;
UPDATE smcp_user_rooms SET shared_at = created_at;
ALTER TABLE smcp_user_rooms ALTER COLUMN shared_at SET NOT NULL, ALTER COLUMN shared_at SET DEFAULT now();
