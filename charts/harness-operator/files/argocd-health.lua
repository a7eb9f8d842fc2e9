-- Argo CD health check for HarnessRun, HarnessDefinition and ClusterHarnessDefinition (agentharness.dev).
-- Reads the standard conditions the operator writes: Stalled True is Degraded (with the reason), Ready
-- True is Healthy, anything else Progressing (a run Kueue holds back is Suspended). An object the
-- operator has not written yet, or whose latest spec it has not seen, is Progressing, never Healthy.
local hs = { status = "Progressing", message = "waiting for harness-operator" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "harness-operator has not seen the latest spec yet"
  return hs
end
local ready = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Stalled" and condition.status == "True" then
    return { status = "Degraded", message = (condition.reason or "") .. ": " .. (condition.message or "") }
  end
  if condition.type == "Ready" then
    ready = condition
  end
end
if ready == nil then
  return hs
end
if ready.status == "True" then
  return { status = "Healthy", message = ready.message }
end
if ready.reason == "Suspended" then
  hs.status = "Suspended"
end
hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
return hs
