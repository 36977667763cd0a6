"""Load stage: staging via COPY, set-based typed upserts, quarantine, export."""
