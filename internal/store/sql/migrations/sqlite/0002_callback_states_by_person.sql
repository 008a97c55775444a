-- Signing out ends the person's pending callback attempts in the project (EndCallbackStates).
CREATE INDEX callback_states_subject ON callback_states (project, subject);
