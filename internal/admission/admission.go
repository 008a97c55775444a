// Package admission applies to a custom resource what the Kubernetes API server applies when
// `kubectl apply` creates one: unknown fields refused (kubectl's strict field validation), the
// schema's defaults filled in, then the OpenAPI schema, the metadata rules, list-type invariants
// and the CEL rules (x-kubernetes-validations) checked. It uses the API server's own packages
// from k8s.io/apiextensions-apiserver on the CustomResourceDefinitions themselves, so an object
// the API server would refuse is refused here with the same message, and one it would store is
// returned with the same defaults. The no-cluster mode (docs/no-cluster.md) reads its objects
// through this.
//
// What needs an API server is not here: admission webhooks (Latchkey has none), ratcheting of
// updates (every object is judged as if created), and server-side apply's field ownership.
package admission

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// Admitter holds the compiled schemas of a set of CustomResourceDefinitions. It is safe for
// concurrent use.
type Admitter struct {
	kinds map[schema.GroupVersionKind]*kind
}

type kind struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	hasStatus  bool
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// New compiles every CustomResourceDefinition in the *.yaml files at the top of fsys, one per
// file, each served version on its own.
func New(fsys fs.FS) (*Admitter, error) {
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("admission: no CustomResourceDefinition found")
	}
	a := &Admitter{kinds: map[schema.GroupVersionKind]*kind{}}
	for _, name := range files {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			return nil, fmt.Errorf("admission: %s: %w", path.Base(name), err)
		}
		if err := a.add(&crd); err != nil {
			return nil, fmt.Errorf("admission: %s: %w", path.Base(name), err)
		}
	}
	return a, nil
}

// add compiles one CRD the way the API server's custom resource handler does (crdInfo).
func (a *Admitter) add(crd *apiextensionsv1.CustomResourceDefinition) error {
	for _, v := range crd.Spec.Versions {
		if !v.Served || v.Schema == nil {
			continue
		}
		internal := &apiextensionsinternal.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
			return fmt.Errorf("converting the schema of %s: %w", v.Name, err)
		}
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return fmt.Errorf("schema of %s is not structural: %w", v.Name, err)
		}
		s = s.DeepCopy()
		if err := structuraldefaulting.PruneDefaults(s); err != nil {
			return fmt.Errorf("schema of %s: %w", v.Name, err)
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return fmt.Errorf("schema of %s: %w", v.Name, err)
		}
		gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
		a.kinds[gvk] = &kind{
			gvk:        gvk,
			namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			hasStatus:  v.Subresources != nil && v.Subresources.Status != nil,
			structural: s,
			validator:  validator,
			cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
		}
	}
	return nil
}

// Kinds lists the group/version/kinds the Admitter knows, sorted.
func (a *Admitter) Kinds() []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, 0, len(a.kinds))
	for gvk := range a.kinds {
		out = append(out, gvk)
	}
	slices.SortFunc(out, func(x, y schema.GroupVersionKind) int { return strings.Compare(x.String(), y.String()) })
	return out
}

// Knows reports whether gvk is one of the Admitter's kinds.
func (a *Admitter) Knows(gvk schema.GroupVersionKind) bool {
	_, ok := a.kinds[gvk]
	return ok
}

// Admit does to u what creating it through the API server does before storing it, in the same
// order: it refuses unknown fields, drops status (a status subresource is written only by its
// controller), fills in defaults, sets metadata.generation to 1, and validates. u is changed in
// place. A refusal carries the API server's message: an *apierrors.StatusError (Invalid,
// "Kind.group \"name\" is invalid: field: …") for validation, or a BadRequest naming the unknown
// fields.
func (a *Admitter) Admit(ctx context.Context, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	k, ok := a.kinds[gvk]
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("no kind %q is registered for version %q", gvk.Kind, gvk.GroupVersion()))
	}
	if err := k.decode(u); err != nil {
		return err
	}
	if k.hasStatus {
		delete(u.Object, "status")
	}
	structuraldefaulting.Default(u.Object, k.structural)
	u.SetGeneration(1)
	if errs := k.validate(ctx, u); len(errs) > 0 {
		return apierrors.NewInvalid(gvk.GroupKind(), u.GetName(), errs)
	}
	return nil
}

// decode is the API server's schema-coercing decoder with strict field validation (kubectl's
// default since 1.27): unknown fields, in metadata or under the schema, refuse the object.
func (k *kind) decode(u *unstructured.Unstructured) error {
	apiVersion, kindName := u.GetAPIVersion(), u.GetKind()
	meta, found, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u.Object, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return k.badRequest(err.Error())
	}
	unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, k.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, k.structural)
	ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, u.Object, k.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		return k.badRequest(ferr.Error())
	}
	unknown = append(unknown, paths...)
	if len(unknown) > 0 {
		slices.Sort(unknown)
		quoted := make([]string, len(unknown))
		for i, p := range unknown {
			quoted[i] = fmt.Sprintf("unknown field %q", p)
		}
		return k.badRequest("strict decoding error: " + strings.Join(quoted, ", "))
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kindName)
	if found {
		if err := schemaobjectmeta.SetObjectMeta(u.Object, meta); err != nil {
			return k.badRequest(err.Error())
		}
	}
	return nil
}

func (k *kind) badRequest(msg string) error {
	return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %s", k.gvk.Kind, k.gvk.Version, k.gvk.Kind, msg))
}

// validate is the custom resource strategy's Validate for a create.
func (k *kind) validate(ctx context.Context, u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if u.GetKind() != k.gvk.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), "must be "+k.gvk.Kind))
	}
	if u.GetAPIVersion() != k.gvk.GroupVersion().String() {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), "must be "+k.gvk.GroupVersion().String()))
	}
	if len(errs) > 0 {
		return errs
	}
	errs = append(errs, metavalidation.ValidateObjectMetaAccessor(u, k.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), k.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, k.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, k.structural, u.Object)...)
	// As the API server: CEL rules run only when nothing found so far would make them fail to
	// evaluate (a wrong type, a missing required field, an unknown enum value, a value over its
	// limit), and the refusal says some rules were not checked.
	if hasBlocking(errs) {
		return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	}
	celErrs, _ := k.cel.Validate(ctx, nil, k.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// hasBlocking is the custom resource strategy's hasBlockingErr.
func hasBlocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}
