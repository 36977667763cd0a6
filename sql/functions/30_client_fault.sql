-- fn.is_client_fault_finish(input_tokens, output_tokens, has_payload, payload_is_client_fault): is this inference's
-- Finish a client-fault Finish (gonka-devshard.md §3.6)? is_client_fault_finish := the Finish is 0/0 AND its stored
-- payload passes IsClientFaultErrorResponse (rules.refusal_parse.is_client_fault, parsed for 0/0 payloads only).
--   false  there is no Finish (the loader requires both counts of a Finish, so NULL counts mean none), or it is
--          not 0/0 (an executor signs a client fault as 0/0, §2.1; a served or billed Finish is not one)
--   true / false  a 0/0 Finish whose payload is stored: what the payload says
--   NULL   a 0/0 Finish without a stored payload (or one not parsed yet): unknown. Payloads sit behind the hosts'
--          auth, so most 0/0 Finishes reach us without one (§3.6); unknown is neither a client fault nor not one.
--          Where a rule must turn NULL into a decision, it says which and why.
-- has_payload keeps a parse left from an earlier payload of an amended Finish from answering. The one definition for
-- api.inferences and every rule; a plain SQL expression, so the planner inlines it (a scalar subquery passed as
-- payload_is_client_fault is then evaluated only for 0/0 Finishes with a payload).
CREATE FUNCTION fn.is_client_fault_finish(input_tokens bigint, output_tokens bigint, has_payload boolean,
                                          payload_is_client_fault boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN input_tokens = 0 AND output_tokens = 0 THEN CASE WHEN has_payload THEN payload_is_client_fault END
              ELSE false END
$$;
