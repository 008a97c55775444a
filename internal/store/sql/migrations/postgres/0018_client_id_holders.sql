-- Which namespace holds each OAuthClient id of a Project (docs/decisions/0067). People's grants,
-- agents' permissions and tokens are stored under the client id and outlive the OAuthClient, so
-- an id stays with the namespace that first served it: an OAuthClient of another namespace that
-- declares it later is refused, whether or not the first one still exists. Rows are never
-- changed or collected; an administrator deletes one to let another namespace have the id.
CREATE TABLE client_id_holders (
    project    TEXT NOT NULL,
    client_id  TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    held_since BIGINT NOT NULL,
    PRIMARY KEY (project, client_id)
);
