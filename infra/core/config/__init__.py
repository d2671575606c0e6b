"""Stack config: key rules (schema), sections (sections, shared_images), loading (stack), Pulumi's merge (engine)."""
