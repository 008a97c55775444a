-- Argo CD health check for Latchkey's kinds: Project, OAuthClient, Connector and RedirectPolicy
-- (group latchkey.dev). Argo CD runs it with the live object as `obj`; it returns a table with
-- `status` and `message`. docs/gitops.md shows where it goes (argocd-cm,
-- resource.customizations.health.latchkey.dev_<Kind>); docs/decisions/0028 says what the
-- conditions mean. controllers/argocd_health_test.go runs this file and keeps a Go copy of the
-- same rules: change both together.
--
--   Degraded     Ready=False (the object does not serve) or Degraded=True (it serves with a
--                feature off: a broken Secret, a connector that does not resolve). The message
--                is the condition's reason and message, which say how to fix it.
--   Healthy      Ready=True, Degraded absent or not True, and status.observedGeneration equal to
--                metadata.generation (the controller has acted on the current spec).
--   Progressing  anything else: no status yet, Ready Unknown, or a newer spec not acted on.
local hs = { status = "Progressing", message = "waiting for the Latchkey controller" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end

local ready, degraded
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    ready = c
  elseif c.type == "Degraded" then
    degraded = c
  end
end

local function says(c)
  return (c.reason or "") .. ": " .. (c.message or "")
end

if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = says(ready)
  return hs
end
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = says(degraded)
  return hs
end
if ready ~= nil and ready.status == "True" then
  local generation = obj.metadata and obj.metadata.generation
  if generation ~= nil and obj.status.observedGeneration == generation then
    hs.status = "Healthy"
    hs.message = ready.message or ""
    return hs
  end
  hs.message = "waiting for the controller to act on generation " .. tostring(generation)
end
return hs
